"""The API reference's members: which public methods and properties of the documented classes
users call (CALLED) and which are public only because other layers call them (INTERNAL).

Both are keyed by the class that defines the names (a handle's `wait` is its base Stateful's).
docs/hooks.py shows only the CALLED ones on the reference pages; tests/test_docs.py fails on a
public method or property of a documented class that is in neither (docs/hooks.py's
`unsorted_members`), so a new one cannot land undocumented by accident, and on a name listed
here that its class no longer defines.  (Most INTERNAL names are in files other engineers were
changing when this was written; once made private there, they leave this list.)
"""

_CORE = "pilot.pmgr.core."
_RP1 = "pilot.pmgr.compat.rp1."
_ENTK = "pilot.pmgr.compat.entk."
CALLED = {
    "pilot.fields.Description": ["as_dict", "get", "keys", "with_fields"],
    "pilot.unit_description.ComputeUnitDescription": ["as_dict"],
    "pilot.partition_description.ComputePartitionDescription": [
        *("agent_config", "asks_gpus", "share"),
    ],
    "pilot.groups.UnitGroup": ["add"],
    "pilot.policy.Policy": ["from_dict", "to_dict"],
    _CORE + "session.Session": ["close", "deposed", "get_resource_config"],
    _CORE + "pilot_manager.PilotManager": [
        *("cancel_pilots", "get_pilots", "list_pilots", "wait_pilots"),
    ],
    _CORE + "unit_manager.UnitManager": [
        *("add_pilots", "cancel_units", "get_pilots", "list_pilots", "register_callback"),
        *("register_output_callback", "remove_pilots", "stream", "submit_units"),
        *("unregister_callback", "get_units", "list_units", "states", "wait_units", "uid"),
    ],
    _CORE + "unit_stream.UnitStream": [
        *("cancel", "count", "counts", "done", "failed", "feed", "start", "uids", "units"),
        "wait",
    ],
    _CORE + "handles.Stateful": ["final", "register_callback", "wait"],
    _CORE + "handles.Partition": [
        *("cancel", "cores", "could_hold", "gpus", "largest_node", "window", "window_for"),
    ],
    _CORE + "handles.Unit": [
        *("as_dict", "cancel", "client_sandbox", "metadata", "name", "output"),
        *("pilot_sandbox", "return_value", "sandbox", "stderr", "stdout", "unit_sandbox"),
    ],
    _CORE + "pilot.Pilot": [
        *("adapt_log", "as_dict", "cancel", "client_sandbox", "exit_on_error", "free", "jobs"),
        "log",
        *("nodes", "partition", "partitions", "pilot_sandbox", "reconfig", "resource_sandbox"),
        *("endpoint_fs", "session_sandbox", "stage_in", "stage_out", "stderr", "stdout"),
    ],
    "pilot.pmgr.compat.futures.executor.Executor": [
        *("call_fields", "cancel_units", "map", "partition", "pilot", "session", "shutdown"),
        *("submit", "submit_call", "submit_unit", "unit_manager"),
    ],
    _RP1 + "pilots.PilotManager": ["register_callback", "submit_pilots"],
    _RP1 + "tasks.TaskManager": [
        *("add_pilots", "cancel_tasks", "cancel_units", "get_tasks", "list_tasks"),
        *("pilot_rpc", "submit_raptors", "submit_tasks", "submit_workers", "wait_tasks"),
        *("register_callback", "unregister_callback"),
    ],
    _RP1 + "task.Task": [
        *("as_dict", "client_sandbox", "exception_detail", "mode", "output_files"),
        *("partition", "register_callback", "resource_sandbox", "session_sandbox"),
        *("task_sandbox", "tmgr", "wait"),
    ],
    _RP1 + "task_description.TaskDescription": ["as_dict"],
    _RP1 + "raptor.Raptor": ["cancel", "partition_uid", "rpc", "submit_tasks", "submit_workers"],
    _RP1 + "raptor.RaptorWorker": ["cancel"],
    _RP1 + "nodes.NodeList": ["find_slots", "release_slots"],
    _ENTK + "appmanager.AppManager": [
        *("name", "outputs", "pilot", "reconfig", "resource_desc", "resource_terminate"),
        *("run", "services", "session", "shared_data", "sid", "terminate", "workflow"),
        "workflows",
    ],
    _ENTK + "pipeline.Pipeline": [
        *("add_stages", "as_dict", "completed", "current_stage", "lock", "luid", "name"),
        *("resume", "stages", "state", "state_history", "suspend", "uid"),
    ],
    _ENTK + "stage.Stage": [
        *("add_tasks", "as_dict", "luid", "name", "parent_pipeline", "partition"),
        *("post_exec", "reconfig", "state", "state_history", "tasks", "uid"),
    ],
    _ENTK + "task.Task": ["from_dict", "luid"],
    "pilot.pmgr.compat.parsl.executor.PilotExecutor": ["shutdown", "start", "submit"],
}
INTERNAL = {
    "pilot.fields.Description": ["check", "from_stored", "peek", "to_stored"],
    "pilot.unit_description.ComputeUnitDescription": [
        *("check", "rank_cores", "rank_gpus", "submit_error", "to_stored"),
    ],
    "pilot.partition_description.ComputePartitionDescription": ["check"],
    "pilot.adapt_policy.Adapt": ["check"],
    "pilot.pilot_description.PilotDescription": ["as_pilot", "submit_error"],
    _CORE + "session.Session": [
        *("check_owner", "read_store", "tell_waiting", "unpersisted", "wait_for"),
    ],
    # (what a face calls: enqueue; what its pilots' adapt policy asks: waiting)
    _CORE + "unit_manager.UnitManager": [
        *("make_units", "pinned_to_unknown", "enqueue", "feeding", "find_partition"),
        *("said_again", "unit_from_doc", "waiting"),
    ],
    _CORE + "handles.Stateful": ["advance", "manager_callbacks"],
    _CORE + "handles.Partition": ["as_doc", "rate"],
    _CORE + "handles.Unit": ["add_output", "as_doc", "manager_callbacks", "own_fields", "wire"],
    _CORE + "pilot.Pilot": [
        *("as_doc", "client_endpoint", "command", "end", "ending", "hand_orphans"),
        *("kill_job", "lost", "manager_callbacks", "new_partition", "on_back", "on_bye"),
        *("on_hb", "on_hello", "on_lost", "on_output", "on_partition_state", "on_reply"),
        *("on_states", "on_synced", "on_taken_over", "on_unit_moves", "request_cancel"),
        *("stop_partitions", "taken_over_unheard", "tick", "unreachable"),
        *("join_config", "on_grow", "on_jobs", "on_release", "runtime_left", "release_to"),
        "lost_to_us",
    ],
    _RP1 + "pilots.PilotManager": ["before_job"],
    _RP1 + "tasks.TaskManager": ["make_tasks", "note_change"],
    _RP1 + "task.Task": ["advance"],
    _RP1 + "task_description.TaskDescription": [
        *("rank_gpus", "raw", "refused", "submit_error", "to_be_formed"),
    ],
    _RP1 + "nodes.Node": ["as_pool"],
    _ENTK + "pipeline.Pipeline": ["check_runnable", "next_stage", "stage_now", "unwatch", "watch"],
    _ENTK + "stage.Stage": ["check_runnable", "ended", "ordered_tasks", "partition_names"],
    _ENTK + "task.Task": ["check_runnable", "seq"],
    "pilot.pmgr.compat.parsl.executor.PilotExecutor": ["monitor_resources"],  # (Parsl's call)
}

"""EnTK's data movement, each kind once, and a task that fails.  In the working directory the
script writes shared.txt ('shared') and local.txt ('local'), then runs pipeline 'data':

    make    task 'maker': upload_input_data local.txt > up.txt; copy_input_data
            $SHARED/shared.txt (AppManager.shared_data put it there); an argument
            '$SHARED/shared.txt' (cp it to arg.txt); writes both.txt = shared + local and
            upper.txt = both in capitals; copy_output_data upper.txt > $SHARED/upper.txt
    use     task 'user': link_input_data $Pipeline_data_Stage_make_Task_maker/both.txt (by
            names), copy_input_data $Pipeline_<uids>/arg.txt (by uids) and $SHARED/upper.txt;
            writes all.txt = both + arg + upper; download_output_data all.txt > got/all.txt
and pipeline 'bad': one task that exits 3 (not error_is_fatal: its stage and pipeline end,
the task FAILED with its exit code).  AppManager.outputs brings $SHARED/upper.txt back as
final.txt."""

import common

import pilot.entk as re

if __name__ == "__main__":
    for name, text in (("shared.txt", "shared\n"), ("local.txt", "local\n")):
        with open(name, "w") as f:
            f.write(text)

    maker = re.Task()
    maker.name = "maker"
    maker.executable = "/bin/cp"
    maker.arguments = ["$SHARED/shared.txt", "arg.txt"]
    maker.upload_input_data = ["local.txt > up.txt"]
    maker.copy_input_data = ["$SHARED/shared.txt"]
    maker.post_exec = ["cat shared.txt up.txt > both.txt", "tr a-z A-Z < both.txt > upper.txt"]
    maker.copy_output_data = ["upper.txt > $SHARED/upper.txt"]
    make = common.stage("make", [maker])
    pipe = common.pipeline("data", [make])

    user = re.Task()
    user.name = "user"
    user.executable = "/bin/sh"
    user.arguments = ["-c", "cat both.txt arg.txt upper.txt > all.txt"]
    user.link_input_data = ["$Pipeline_data_Stage_make_Task_maker/both.txt"]
    user.copy_input_data = [
        f"$Pipeline_{pipe.uid}_Stage_{make.uid}_Task_{maker.uid}/arg.txt",
        "$SHARED/upper.txt",
    ]
    user.download_output_data = ["all.txt > got/all.txt"]
    pipe.add_stages(common.stage("use", [user]))

    failing = re.Task()
    failing.name = "failing"
    failing.executable = "/bin/sh"
    failing.arguments = ["-c", "echo going wrong >&2; exit 3"]
    bad = common.pipeline("bad", [common.stage("only", [failing])])

    amgr = re.AppManager()
    amgr.resource_desc = {"resource": "local.localhost", "walltime": 10, "cpus": 2}
    amgr.shared_data = ["shared.txt"]
    amgr.outputs = ["$SHARED/upper.txt > final.txt"]
    amgr.workflow = [pipe, bad]
    amgr.run()
    amgr.terminate()
    common.summary([pipe, bad], detail=failing.exception_detail)

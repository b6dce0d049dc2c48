"""`rp.utils`: RADICAL-Pilot 1.x's look-ups of resource configs, over this project's.

    get_resource_configs()                    {site: {name: config}}: every resource
    get_resource_config(resource)             one resource's RP config (a dict), or None
    get_resource_job_url(resource, schema)    its schema's job_manager_endpoint
    get_resource_fs_url(resource, schema)     its schema's filesystem_endpoint
    pilot_endpoints(resource, schema, config) a pilot's js_url, js_hop and endpoint_fs (as_dict)

RP's configs (pilot/config/rp_sites.py: the shipped resource_*.json and the user's) are given as
RP reads them; this project's YAML resources as the RP config they amount to (`rp_view`), the
user's entry of that name laid over them, as for a pilot.  `Session.get_resource_config` is
here too (`session_config`): the schema's entry laid over the config, and its `label`.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pilot.config import resource_config, rp_sites


def get_resource_configs() -> dict[str, dict]:
    """Every resource's RP config, by site and name."""
    out: dict[str, dict] = {}
    for name in resource_config.known_resources():
        site, _, res = name.partition(".")
        cfg = get_resource_config(name)
        if cfg is not None:
            out.setdefault(site, {})[res] = cfg
    return out


def get_resource_config(resource: str) -> dict | None:
    """The RP config of `resource` (SITE.NAME), or None when there is none."""
    if not isinstance(resource, str) or "." not in resource:
        return None
    if resource in resource_config.native_resources():  # (the user's entry laid over it)
        return rp_sites.rp_view(resource, resource_config.load(resource))
    return rp_sites.find(resource)


def _endpoint(resource: str, schema: str | None, key: str) -> str | None:
    cfg = get_resource_config(resource)
    if cfg is None:
        return None
    try:
        return rp_sites.with_schema(resource, cfg, schema).get(key)
    except ValueError:
        return None


def get_resource_job_url(resource: str, schema: str | None = None) -> str | None:
    """The job_manager_endpoint of `resource`'s access schema (default: its default_schema)."""
    return _endpoint(resource, schema, "job_manager_endpoint")


def get_resource_fs_url(resource: str, schema: str | None = None) -> str | None:
    """The filesystem_endpoint of `resource`'s access schema (default: its default_schema)."""
    return _endpoint(resource, schema, "filesystem_endpoint")


def pilot_endpoints(resource: str, schema: str | None, config=None) -> tuple[str, str, str]:
    """RP 1.x's js_url, js_hop and endpoint_fs of a pilot on `resource` with access schema
    `schema` (as its session's _get_jsurl and _get_endpoint_fs make them): the schema's
    job_manager_endpoint; job_manager_hop, else that endpoint with the scheme `ssh` (`gsissh`)
    when it goes through ssh, `fork` otherwise; the root of its filesystem_endpoint.  A
    resource given as a config file's path is its ResourceConfig `config`'s RP view; a schema
    a YAML resource does not name (it takes any) is its own."""
    cfg = get_resource_config(resource)
    if cfg is None and config is not None:
        cfg = rp_sites.rp_view(resource, config)
    try:
        cfg = rp_sites.with_schema(resource, cfg or {}, schema)
    except ValueError:
        cfg = rp_sites.with_schema(resource, cfg or {}, None)
    js_url = str(cfg.get("job_manager_endpoint") or "")
    hop = str(cfg.get("job_manager_hop") or js_url)
    scheme, sep, rest = hop.partition("://")
    if sep:
        if "+gsissh" in scheme or "gsissh+" in scheme:
            scheme = "gsissh"
        elif "+ssh" in scheme or "ssh+" in scheme:
            scheme = "ssh"
        else:
            scheme = "fork"
        hop = f"{scheme}://{rest}"
    fs = urlsplit(str(cfg.get("filesystem_endpoint") or "file://localhost/"))
    return js_url, hop, f"{fs.scheme}://{fs.netloc}/"


def session_config(resource: str, schema: str | None = None) -> dict:
    """RP's session.get_resource_config: RuntimeError (RP's) for an unknown resource or
    schema."""
    cfg = get_resource_config(resource)
    if cfg is None:
        raise RuntimeError(f"resource {resource!r} is unknown")
    try:
        return rp_sites.with_schema(resource, cfg, schema)
    except ValueError as exc:
        raise RuntimeError(str(exc)) from None

"""Configuration: the resource config keys, each with its check and its doc
(resource_keys.py), resource configs found and merged (resource_config.py), RADICAL-Pilot's
site files read into them (rp_sites.py), a node's network descriptor (network.py), and the
plugin families (plugins.py: a name -> the "module:attribute" that implements it)."""

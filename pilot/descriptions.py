"""The descriptions a user writes: units, partitions and pilots, as plain validated data.

One module per kind, all named here (`from pilot.descriptions import ...` is the way in):
    pilot/unit_description.py        ComputeUnitDescription
    pilot/partition_description.py   ComputePartitionDescription, FILL (and ALL, pilot/ids.py)
    pilot/pilot_description.py       ComputePilotDescription
The base class and the validators are in pilot/fields.py: a field set to a bad value raises
ValueError naming the description, the field, the value and what would be accepted.  No
description reads a file or sizes anything; a pilot is sized where it is submitted
(partition/plan.py), which also checks what needs the resource config (GPUs, agent configs).
"""

from __future__ import annotations

from pilot.ids import ALL as ALL  # all partitions (reconfig stop=) / all GPUs (gpus=)
from pilot.partition_description import (
    FILL as FILL,
    ComputePartitionDescription as ComputePartitionDescription,
)
from pilot.pilot_description import ComputePilotDescription as ComputePilotDescription
from pilot.unit_description import ComputeUnitDescription as ComputeUnitDescription

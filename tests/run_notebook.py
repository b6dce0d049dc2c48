"""Run one of RADICAL-Pilot's tutorial notebooks (tests/rp_tutorials/) as its reader would:

    python -m tests.run_notebook NOTEBOOK.ipynb OUT.json

in the working directory given, with a kernel of this interpreter (ipykernel), its cells in
order, shell escapes as written, only the import line changed (`import radical.pilot as rp` ->
`import pilot as rp`).  Writes the text each code cell showed (streams, results, errors) to
OUT.json, [[cell index, source, text], ...], and exits 1 when a cell raised (the rest is not
run, as in Jupyter's "run all").  Every cell has a deadline (CELL_TIMEOUT); the kernel is shut
down at the end, whatever happened.  The kernel talks to this process over unix sockets in the
working directory (transport ipc), not TCP ports: jupyter_client picks free ports and closes
them before the kernel binds them, and a test running beside this one (on another pytest-xdist
worker, binding ports of its own) took one in between once ("Address already in use" in
try_bind_socket, the notebook failing before its first cell).
"""

from __future__ import annotations

import json
import os
import sys

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

CELL_TIMEOUT = 300
IMPORT = ("import radical.pilot as rp", "import pilot as rp")


def shown(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif out.get("output_type") in ("execute_result", "display_data"):
            parts.append(out.get("data", {}).get("text/plain", "") + "\n")
        elif out.get("output_type") == "error":
            parts.append(f"{out.get('ename')}: {out.get('evalue')}\n")
    return "".join(parts)


def main() -> int:
    path, out_path = sys.argv[1], sys.argv[2]
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = cell.source.replace(*IMPORT)
    km = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.abspath("kernel"))
    client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT, kernel_name="python3")
    failed = 0
    try:
        client.execute()
    except CellExecutionError:
        failed = 1
    finally:
        shown_cells = [
            [i, c.source, shown(c)] for i, c in enumerate(nb.cells) if c.cell_type == "code"
        ]
        with open(out_path, "w") as f:
            json.dump(shown_cells, f, indent=1)
    return failed


if __name__ == "__main__":
    sys.exit(main())

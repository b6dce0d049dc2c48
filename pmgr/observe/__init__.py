"""Seeing what a pilot did (or is doing): views of a session read from its state store.

timeline.py   a session's pilots, partitions, units and reconfigs as plain records
series.py     step series aggregated from them (busy cores / GPUs, units per state)
bins.py       the same series as means per time bin, streamed from the store (big sessions)
plot.py       `pilot plot`: one matplotlib figure of those series
trace.py      `pilot export --format chrome-trace`: Trace Event Format JSON
text.py       `pilot status` and `pilot export --format jsonl`
top.py        `pilot top`: a live view of a running pilot (its terminal loop), over
              top_target.py (which pilot), top_store.py (reading the store),
              top_snapshot.py (one look at the pilot), top_frame.py (drawing a frame)
dashboard.py  `pilot dashboard`: the session live in a browser (tornado, Server-Sent Events),
              over dashboard_data.py (one look as JSON, the series from unit_flow) and
              dashboard_static/ (the page, its script, uPlot)
extras.py     optional dependencies (`pip install 'pilot-partitions[observe]'`)
"""

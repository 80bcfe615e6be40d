"""§12.3.5 and exercise 12-7: the cross-region speech case, recomputed from its stated inputs.

Measured medians (1185.3, 301.6, 240.9, 236.5 ms) are inputs here; the lab
(`tierwise lab request`) measures its own. Ratios and the ideal time follow from them.
"""

from __future__ import annotations

MS = 1e-3

SPEECH = """
[task]
kind = "request"
upload = "354640 B"
[task.compute]
time = "30 ms"
[[site]]
name = "remote"
tier = "cloud"
uplink = "333 Mbit/s"
rtt = "200 ms"
[[site]]
name = "near"
tier = "edge"
uplink = "333 Mbit/s"
rtt = "20 ms"
[decision]
objective = "time"
"""

ROWS = [
    (
        "§12.3.5",
        "ideal send of 355 KB at 333 Mbit/s",
        lambda p: p.option("remote").breakdown_s["upload"] / MS,
        8.5,
        0.05,
    ),
    ("§12.3.5", "ideal request 238.5 ms", lambda p: p.option("remote").time_s / MS, 238.5, 0.05),
    (
        "12-7(b)",
        "unexplained wait against ~1 s measured",
        lambda p: (1.0 - p.option("remote").time_s) / MS,
        761.5,
        0.5,
    ),
    (
        "§12.3.5",
        "20 ms RTT saves about 180 ms",
        lambda p: (p.option("remote").time_s - p.option("near").time_s) / MS,
        180,
        0.5,
    ),
]

"""§12.5 and exercise 12-8: every printed number of the deployment case, through the planner.

One row per number: (section, what, overrides, extractor, expected, tolerance).
Tolerances match the printed rounding.
"""

from __future__ import annotations

MBIT = 125_000.0


def _opt(site, attr="time_s"):
    return lambda p: getattr(p.option(site), attr)


def _brk(site, part):
    return lambda p: p.option(site).breakdown_s[part]


def _energy(site, i=None):
    return lambda p: p.option(site).energy_j if i is None else p.option(site).energy_j[i]


def _th(site, kind, field="uplink_bytes_per_s", scale=1.0):
    def get(p):
        rows = [t for t in p.thresholds if t["site"] == site and t["kind"] == kind]
        assert rows, f"no {kind} threshold for {site}: {p.thresholds}"
        return rows[0][field] / scale if isinstance(rows[0][field], float) else rows[0][field]

    return get


SLOW = ("site.workstation.decode_slowdown=2.83", "site.cloud.decode_slowdown=2.83")
TEN = ("task.rounds=10", "task.deadline=23 s")
CUT8 = ("task.disconnect.after_round=8", "task.disconnect.reconnect=2 s")
# §12.5.2 from the measurement itself: 25.83 ms per BF16 8K step on the workstation,
# the same factor on the cloud GPU.
MEASURED = (
    "site.workstation.measured_decode=25.83 ms",
    "site.workstation.measured_weights=bf16",
    "site.cloud.slowdown_from=workstation",
)

ROWS = [
    ("§12.5.2", "phone 20 rounds", (), _opt("phone"), 64.0, 0.05),
    ("§12.5.2", "workstation 20 rounds", (), _opt("workstation"), 11.0, 0.05),
    ("§12.5.2", "cloud 20 rounds", (), _opt("cloud"), 31.6, 0.05),
    ("§12.5.1", "workstation prepare", (), _brk("workstation", "prepare"), 0.27, 0.005),
    ("§12.5.1", "cloud prepare", (), _brk("cloud", "prepare"), 0.14, 0.005),
    (
        "§12.5.1",
        "phone per-round model",
        (),
        lambda p: p.option("phone").breakdown_s["model"] / 20,
        2.90,
        0.005,
    ),
    (
        "§12.5.1",
        "workstation per-round model",
        (),
        lambda p: p.option("workstation").breakdown_s["model"] / 20,
        0.137,
        0.0005,
    ),
    (
        "§12.5.1",
        "cloud per-round model",
        (),
        lambda p: p.option("cloud").breakdown_s["model"] / 20,
        0.073,
        0.0005,
    ),
    ("§12.5.1", "phone energy low", (), _energy("phone", 0), 518, 0.5),
    ("§12.5.1", "phone energy high", (), _energy("phone", 1), 680, 0.5),
    ("§12.5.1", "workstation energy", (), _energy("workstation"), 1810, 5),
    ("§12.5.1", "cloud energy", (), _energy("cloud"), 1120, 5),
    ("§12.5.2", "figure 12-28 phone model", (), _brk("phone", "model"), 58.0, 0.05),
    ("§12.5.2", "figure 12-29 workstation model", (), _brk("workstation", "model"), 2.7, 0.05),
    ("§12.5.2", "figure 12-29 workstation upload", (), _brk("workstation", "upload"), 1.6, 0.05),
    ("§12.5.2", "figure 12-29 propagation", (), _brk("workstation", "propagation"), 0.4, 0.05),
    ("§12.5.2", "figure 12-30 cloud model", (), _brk("cloud", "model"), 1.5, 0.05),
    ("§12.5.2", "figure 12-30 cloud upload", (), _brk("cloud", "upload"), 20.0, 0.05),
    ("§12.5.2", "figure 12-30 cloud propagation", (), _brk("cloud", "propagation"), 4.0, 0.05),
    (
        "§12.5.2",
        "cloud slower than workstation by",
        (),
        lambda p: p.option("cloud").time_s - p.option("workstation").time_s,
        20.6,
        0.05,
    ),
    (
        "§12.5.2",
        "battery share low",
        (),
        lambda p: p.option("phone").extra["battery_share"][0],
        0.034,
        0.0005,
    ),
    (
        "§12.5.2",
        "battery share high",
        (),
        lambda p: p.option("phone").extra["battery_share"][1],
        0.041,
        0.0005,
    ),
    ("§12.5.2", "cloud floor 11.6 s", (), _th("cloud", "meets_deadline", "floor_s"), 11.6, 0.05),
    (
        "§12.5.2",
        "cloud meets deadline from 3.8 Mbit/s",
        (),
        _th("cloud", "meets_deadline", scale=MBIT),
        3.8,
        0.05,
    ),
    (
        "§12.5.2",
        "cloud never faster than workstation",
        (),
        _th("cloud", "faster_than", "never"),
        True,
        0,
    ),
    ("§12.5.2", "cloud at 4 Mbit/s", ("site.cloud.uplink=4 Mbit/s",), _opt("cloud"), 43.6, 0.05),
    (
        "§12.5.2",
        "cloud at 3.5 Mbit/s",
        ("site.cloud.uplink=3.5 Mbit/s",),
        _opt("cloud"),
        48.2,
        0.05,
    ),
    ("§12.5.2", "slack at 6.4 Mbit/s", (), lambda p: 45 - p.option("cloud").time_s, 13.4, 0.05),
    (
        "§12.5.2",
        "mixed 6/10 Mbit/s schedule",
        ("site.cloud.uplink=" + str(["6 Mbit/s"] * 10 + ["10 Mbit/s"] * 10).replace("'", '"'),),
        _opt("cloud"),
        28.7,
        0.05,
    ),
    ("§12.5.2", "constant 8 Mbit/s", ("site.cloud.uplink=8 Mbit/s",), _opt("cloud"), 27.6, 0.05),
    ("§12.5.2", "slowdown: workstation", SLOW, _opt("workstation"), 16.04, 0.01),
    (
        "§12.5.2",
        "slowdown 25.83/9.12: workstation",
        ("site.workstation.decode_slowdown=2.8322", "site.cloud.decode_slowdown=2.8322"),
        _opt("workstation"),
        16.04,
        0.005,
    ),
    (
        "§12.5.2",
        "slowdown: cloud without upload",
        SLOW,
        lambda p: p.option("cloud").time_s - p.option("cloud").breakdown_s["upload"],
        14.29,
        0.005,
    ),
    (
        "§12.5.2",
        "slowdown: cloud beats workstation from 73 Mbit/s",
        SLOW,
        _th("cloud", "faster_than", scale=MBIT),
        73,
        0.5,
    ),
    ("§12.5.2", "measured 25.83 ms: workstation", MEASURED, _opt("workstation"), 16.04, 0.005),
    (
        "§12.5.2",
        "measured 25.83 ms: cloud without upload",
        MEASURED,
        lambda p: p.option("cloud").time_s - p.option("cloud").breakdown_s["upload"],
        14.29,
        0.005,
    ),
    (
        "§12.5.2",
        "measured 25.83 ms: gap workstation − cloud without upload",
        MEASURED,
        lambda p: (
            p.option("workstation").time_s
            - p.option("cloud").time_s
            + p.option("cloud").breakdown_s["upload"]
        ),
        1.75,
        0.005,
    ),
    (
        "§12.5.2",
        "measured 25.83 ms: cloud beats workstation from 73 Mbit/s",
        MEASURED,
        _th("cloud", "faster_than", scale=MBIT),
        73,
        0.5,
    ),
    (
        "§12.5.2",
        "disconnect, progress kept",
        (
            "task.disconnect.after_round=10",
            "task.disconnect.reconnect=1 s",
            "task.disconnect.progress=kept",
        ),
        _opt("cloud"),
        34.2,
        0.05,
    ),
    (
        "§12.5.2",
        "disconnect, progress lost",
        (
            "task.disconnect.after_round=10",
            "task.disconnect.reconnect=1 s",
            "task.disconnect.progress=lost",
        ),
        _opt("cloud"),
        48.3,
        0.05,
    ),
    (
        "§12.5.2",
        "disconnect kept adds 2.57 s",
        ("task.disconnect.after_round=10", "task.disconnect.reconnect=1 s"),
        _brk("cloud", "disconnect"),
        2.57,
        0.005,
    ),
    (
        "§12.5.2",
        "disconnect lost adds 16.7 s",
        (
            "task.disconnect.after_round=10",
            "task.disconnect.reconnect=1 s",
            "task.disconnect.progress=lost",
        ),
        _brk("cloud", "disconnect"),
        16.7,
        0.05,
    ),
    (
        "§12.5.2",
        "workstation loses ten rounds",
        (
            "task.disconnect.after_round=10",
            "task.disconnect.reconnect=1 s",
            "task.disconnect.progress=lost",
        ),
        _opt("workstation"),
        17.4,
        0.05,
    ),
    (
        "§12.5.3",
        "versus the original 70 s service",
        (),
        lambda p: 70 - p.option("cloud").time_s,
        38.4,
        0.05,
    ),
    ("12-8(b)", "ten rounds: cloud time", TEN, _opt("cloud"), 15.87, 0.005),
    ("12-8(b)", "ten rounds: workstation time", TEN, _opt("workstation"), 5.64, 0.005),
    ("12-8(b)", "ten rounds: phone time", TEN, _opt("phone"), 32.0, 0.05),
    ("12-8(b)", "ten rounds: cloud energy", TEN, _energy("cloud"), 608, 1),
    ("12-8(b)", "ten rounds: workstation energy", TEN, _energy("workstation"), 983, 1),
    ("12-8(d)", "cut after 8, kept: cloud", (*TEN, *CUT8), _opt("cloud"), 19.45, 0.01),
    (
        "12-8(d)",
        "cut after 8, lost: cloud",
        (*TEN, *CUT8, "task.disconnect.progress=lost"),
        _opt("cloud"),
        30.46,
        0.01,
    ),
    (
        "12-8(d)",
        "cut after 8, lost: workstation",
        (*TEN, *CUT8, "task.disconnect.progress=lost"),
        _opt("workstation"),
        11.94,
        0.01,
    ),
    (
        "12-8(d)",
        "cut after 8, kept: cloud energy redoes one round",
        (*TEN, *CUT8),
        _energy("cloud"),
        659.8,
        1,
    ),
]


CHOICES = [
    ("§12.5.2", (), "cloud"),
    ("§12.5.3", ("site.cloud.uplink=3.5 Mbit/s",), "workstation"),
    ("12-8(b)", TEN, "cloud"),
    ("12-8(b)", ("task.rounds=10", "task.deadline=15 s"), "workstation"),
    ("12-8(d)", (*TEN, *CUT8), "cloud"),
    ("12-8(d)", (*TEN, *CUT8, "task.disconnect.progress=lost"), "workstation"),
    (
        "§12.5.3",
        (
            "task.disconnect.after_round=10",
            "task.disconnect.reconnect=1 s",
            "task.disconnect.progress=lost",
        ),
        "workstation",
    ),
    ("§12.5.1", ("task.residency=device",), None),
]

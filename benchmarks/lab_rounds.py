"""Validation: the upload's rounds on the wire, cold, per congestion control (as root).

One cold §12.3.5 request (354,640 B up, 30 ms processing, 1,000 B back) per
congestion control over a 200 ms / 100 Mbit/s lab path, with the server's TUN
device captured (:mod:`tierwise.lab.experiments.rounds`). Prints each round of data segments as
it arrived: slow start's 10, 20, 40, 80 … bursts, or BBR's paced Startup. The
figures and what they explain are in docs/validation.md.

    python benchmarks/lab_rounds.py [--cc reno,cubic,bbr] [--initcwnd 10] [--plot DIR]

``--plot DIR`` draws the bytes arrived against time (``lab-rounds.png``/``.svg``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _args import choices_list, positive_int, run

from tierwise.lab.experiments.request import RequestExperiment
from tierwise.lab.experiments.rounds import cold_rounds
from tierwise.lab.views.rounds import save_rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--cc", type=choices_list(("reno", "cubic", "bbr")), default="reno,cubic,bbr"
    )
    parser.add_argument("--initcwnd", type=positive_int, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--plot", type=Path, default=None, help="write lab-rounds.png/.svg here")
    args = parser.parse_args()
    exp = RequestExperiment()
    results = [cold_rounds(exp, cc, args.initcwnd) for cc in args.cc]
    if args.plot is not None:
        title = (
            f"cold {exp.size_bytes:,} B request, RTT {exp.rtt_s * 1e3:g} ms, "
            f"{exp.rate_bytes_per_s * 8e-6:g} Mbit/s: the upload's rounds at the server"
        )
        stem = "lab-rounds" + (f"-iw{args.initcwnd}" if args.initcwnd else "")
        for path in save_rounds(results, args.plot, stem, rtt_s=exp.rtt_s, title=title):
            print(f"wrote {path}")
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for res in results:
        print(f"{res['cc']}: {res['time_s']:.3f} s cold")
        for r in res["rounds"]:
            print(
                f"  arrived {r['first_ms']:7.1f}–{r['last_ms']:7.1f} ms"
                f"  {r['segments']:4d} segments  {r['bytes']:8,d} B"
                f"  spread {r['last_ms'] - r['first_ms']:6.1f} ms"
            )
        a = res["after"]
        if "bbr_bw_bytes_per_s" in a:
            print(
                f"  after: pacing {a['pacing_rate_bytes_per_s'] * 8e-6:.1f} Mbit/s, "
                f"bw estimate {a['bbr_bw_bytes_per_s'] * 8e-6:.1f} Mbit/s, "
                f"gain {a['bbr_pacing_gain']:.2f}"
            )


if __name__ == "__main__":
    run(main)

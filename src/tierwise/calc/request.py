"""calc entries for one request (§12.1.1)."""

from __future__ import annotations

from tierwise.calc._registry import Param, calc
from tierwise.model import request as m


@calc(
    "request",
    "Serial request time S_u/B_u + R + T_c + S_d/B_d",
    "§12.1.1",
    Param("upload", "size", "input size S_u", "30 MB"),
    Param("uplink", "rate", "uplink B_u", "20 Mbit/s"),
    Param("rtt", "time", "round-trip propagation R", "100 ms"),
    Param("compute", "time", "processing time T_c", "0.3 s"),
    Param("download", "size", "output size S_d", "5 MB"),
    Param("downlink", "rate", "downlink B_d", "100 Mbit/s"),
)
def request(upload, uplink, rtt, compute, download, downlink):
    """T = S_u/B_u + R + T_c + S_d/B_d (connection open, stages in series)."""
    up = m.transfer_s(upload, uplink)
    down = m.transfer_s(download, downlink)
    total = m.serial_time_s(upload, uplink, rtt, compute, download, downlink)
    return {
        "time_s": total,
        "breakdown_s": {"upload": up, "propagation": rtt, "compute": compute, "download": down},
        "upload_share": up / total if total else 0.0,
        "compute_share": compute / total if total else 0.0,
    }


@calc(
    "compression",
    "Time saved by compressing the input, and the break-even uplink",
    "§12.1.1",
    Param("upload", "size", "original input size S_u", "30 MB"),
    Param("ratio", "float", "compressed size / original size", 0.5),
    Param("codec", "time", "added encode + decode time T_e", "0.15 s"),
    Param("uplink", "rate", "uplink B_u", "20 Mbit/s"),
)
def compression(upload, ratio, codec, uplink):
    """ΔT = (S_u − S'_u)/B_u − T_e; break-even uplink B* = (S_u − S'_u)/T_e."""
    compressed = upload * ratio
    out = {
        "compressed_bytes": compressed,
        "transfer_saved_s": m.transfer_s(upload - compressed, uplink),
        "saving_s": m.compression_saving_s(upload, compressed, uplink, codec),
    }
    if codec > 0:
        out["breakeven_uplink_bytes_per_s"] = m.compression_breakeven_uplink_bytes_per_s(
            upload, compressed, codec
        )
    return out


@calc(
    "amdahl",
    "Completion when one part runs k times faster, and the limit as k → ∞",
    "§12.1.1, §12.5.4",
    Param("total", "time", "whole-task time", "12.8 s"),
    Param("part", "time", "the part that is accelerated", "0.3 s"),
    Param("speedup", "float", "speed-up k of that part", 10.0),
)
def amdahl(total, part, speedup):
    """T' = (T − T_p) + T_p/k; limit T − T_p as k → ∞ (Amdahl)."""
    time = m.amdahl_time_s(total, part, speedup)
    limit = m.amdahl_limit_s(total, part)
    return {
        "time_s": time,
        "saved_s": total - time,
        "speedup": total / time if time else float("inf"),
        "limit_s": limit,
        "max_speedup": total / limit if limit else float("inf"),
        "part_share": part / total if total else 0.0,
    }


@calc(
    "chunks",
    "Chunks uploaded, processed and returned as they arrive (or behind a barrier)",
    "§12.1.1",
    Param("upload", "list:time", "upload time of each chunk", "4 s, 4 s, 4 s"),
    Param("compute", "list:time", "processing time of each chunk", "0.1 s, 0.1 s, 0.1 s"),
    Param("download", "list:time", "download time of each chunk", "0.08 s, 0.16 s, 0.16 s"),
    Param("propagation", "time", "one-way propagation", "50 ms"),
    Param("barrier", "bool", "processing needs the whole input", False),
)
def chunks(upload, compute, download, propagation, barrier):
    """c_i = max(a_i, c_{i−1}) + C_i, dn_i = max(c_i, dn_{i−1}) + D_i, done_i = dn_i + d."""
    r = m.chunked_request(upload, compute, download, propagation, barrier=barrier)
    return {
        "time_s": r.time_s,
        "arrive_s": r.arrive_s.tolist(),
        "compute_done_s": r.compute_done_s.tolist(),
        "complete_s": r.complete_s.tolist(),
    }

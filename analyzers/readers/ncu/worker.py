"""Read a .ncu-rep with ``ncu_report`` and print what tracekit needs as one JSON document on stdout.

Run as a separate process by ``tracekit.analyzers.readers.ncu.report`` (``python worker.py REPORT``) because Nsight
Compute's reader aborts the whole interpreter on some damaged files (a protobuf ``Check failed`` -> SIGABRT);
in a child process that becomes a clean error. This file imports only the standard library and ``ncu_report``
(no polars, no tracekit) so the child starts in well under 0.1 s.

Output: ``{"actions": [...]}`` or ``{"error": "..."}``; exit status 0 either way.
"""

from __future__ import annotations

import json
import os
import sys


def _nvtx(action: object) -> list[list[object]]:
    """[[domain name, [push/pop range names, outermost first]], ...] in domain-id order."""
    state = action.nvtx_state()  # type: ignore[attr-defined]
    if state is None:
        return []
    out: list[list[object]] = []
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        if domain is None:
            continue
        names = []
        # push_pop_range(i) is indexed in call-stack order; push_pop_ranges() is only the sorted names.
        for i in range(len(domain.push_pop_ranges())):
            r = domain.push_pop_range(i)
            if r is not None:
                names.append(r.name())
        out.append([domain.name(), names])
    return out


def _rules(action: object, ncu_report: object) -> list[dict[str, object]]:
    msg_type = ncu_report.MsgType  # type: ignore[attr-defined]
    speedup_type = ncu_report.SpeedupType  # type: ignore[attr-defined]
    out = []
    for d in action.rule_results_as_dicts():  # type: ignore[attr-defined]
        message = d.get("rule_message") or {}
        speedup = d.get("speedup_estimation") or {}
        kind = message.get("type")
        stype = speedup.get("type")
        out.append(
            {
                "rule": d.get("rule_identifier"),
                "name": d.get("name"),
                "section": d.get("section_identifier"),
                "kind": msg_type(kind).name if kind is not None else None,
                "title": message.get("title"),
                "message": message.get("message"),
                "speedup_pct": speedup.get("speedup"),
                "speedup_type": speedup_type(stype).name.lower() if stype is not None else None,
            }
        )
    return out


def read(path: str) -> dict[str, object]:
    import ncu_report

    metric_cls = ncu_report.IMetric
    floats = (metric_cls.ValueKind_DOUBLE, metric_cls.ValueKind_FLOAT)
    ints = (metric_cls.ValueKind_UINT32, metric_cls.ValueKind_UINT64)
    strings = (metric_cls.ValueKind_STRING,)
    demangled = ncu_report.IAction.NameBase_DEMANGLED

    ctx = ncu_report.load_report(path)
    actions = []
    for ri in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(ri)
        for ai in range(rng.num_actions()):
            action = rng.action_by_idx(ai)
            metrics = []
            for name in action.metric_names():
                m = action.metric_by_name(name)
                if m is None:
                    continue
                kind = m.kind()
                if kind in floats:
                    value: object = m.as_double()
                    tag = "f"
                elif kind in ints:
                    value, tag = m.as_uint64(), "i"
                elif kind in strings:
                    value, tag = m.as_string(), "s"
                else:
                    value, tag = None, None
                metrics.append([name, tag, value, m.unit()])
            actions.append(
                {
                    "range": ri,
                    "action": ai,
                    "name": action.name(),
                    "demangled": action.name(demangled),
                    "nvtx": _nvtx(action),
                    "metrics": metrics,
                    "rules": _rules(action, ncu_report),
                }
            )
    return {"actions": actions}


def failure(exc: Exception) -> dict[str, object]:
    """The output for a read that failed: why, and whether the reader itself is missing (not the file's fault)."""
    missing = isinstance(exc, ImportError) and (exc.name or "").lstrip("_").startswith("ncu_report")
    return {"error": f"{type(exc).__name__}: {exc}", "missing_reader": missing}


def main(argv: list[str]) -> int:
    try:
        result = read(argv[1])
        text = json.dumps(result, ensure_ascii=False)
        data = text.encode("utf-8")  # damaged names come back with lone surrogates: fail here, not later
    except Exception as exc:  # any failure inside ncu_report means a file we cannot trust
        data = json.dumps(failure(exc)).encode("utf-8")
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    # Leave without interpreter teardown: on the H200 machine a process that had loaded Nsight Compute's
    # _ncu_report extension died by SIGSEGV at exit, after its work was done (faulthandler: no Python frame,
    # extension modules _ncu_report and msgspec). The answer is already written and flushed; a crash after it
    # would make the parent call a good report damaged.
    os._exit(main(sys.argv))

"""Where torch.compile breaks a trial's graph, recorded from Dynamo's own graph-break log (issue #50: the report
said "dynamo graph breaks: 2" and not where), and shown under the results table."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from bakeoff.report.render import render_report
from fake_results import repeats

torch = pytest.importorskip("torch")


def test_a_graph_break_is_recorded_at_its_line_with_its_reason_and_kept_off_stderr(capfd):
    from bakeoff.frameworks.torch.engine import GraphBreaks, compile_settings

    torch._dynamo.reset()
    breaks = compile_settings()
    try:
        def step(x, w):
            loss = (x @ w).sum()
            loss.backward()  # Dynamo does not trace backward(): the graph breaks here
            return loss

        w = torch.randn(3, 3, requires_grad=True)
        torch.compile(step, backend="eager")(torch.randn(3, 3), w)
        assert w.grad is not None  # it ran
        [site] = breaks.sites()
        assert site["at"] == f"{__file__}:{step.__code__.co_firstlineno + 2}", site
        assert "backward" in site["reason"] and site["count"] == 1
        assert "Graph break" not in capfd.readouterr().err  # the record kept, its stack trace not printed
    finally:
        logging.getLogger(GraphBreaks.LOGGER).removeFilter(breaks._keep)
        torch._logging.set_logs()
        torch._dynamo.reset()


def test_the_report_says_where_each_configuration_broke_its_graph(tmp_path):
    sites = [{"at": "/site-packages/bakeoff/workloads/speech_ctc/torch_model.py:70",
              "reason": "Unsupported Tensor.backward() call", "count": 2}]
    graph = [dataclasses.replace(r, extras={**r.extras, "dynamo_graph_breaks_at": sites},
                                 training=dataclasses.replace(r.training, graph_builds=3))
             for r in repeats("torch", "graph", [900] * 3, [2.0] * 3, final_metric=[0.8] * 3)]
    md = render_report([*graph, *repeats("tensorflow", "graph", [500] * 3, [3.0] * 3,
                                 final_metric=[0.8] * 3)], tmp_path)["markdown"]
    text = " ".join(md.read_text().split())
    assert ("Graph breaks, where torch.compile stopped tracing (a run's own record): torch/graph at "
            "torch_model.py:70 (Unsupported Tensor.backward() call) ×2.") in text

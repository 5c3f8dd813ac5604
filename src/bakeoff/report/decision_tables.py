"""The report's decision sections for one (workload, preset): the scores of every mode, the weights (given and
used, with what each criterion scores), and the robustness of the verdict (the joint resampling's shares and the
one-weight-at-a-time sensitivity table). Called by :mod:`bakeoff.report.render`, which orders the sections."""

from __future__ import annotations

from bakeoff.analysis.conditions import BUSY_MARK, display_name
from bakeoff.analysis.decide import Decision, Qualitative
from bakeoff.analysis.intervals import ROBUST_CONFIDENCE
from bakeoff.analysis.quantities import CRITERIA
from bakeoff.analysis.stats import fmt
from bakeoff.analysis.verdict import MIN_RUNS, ROBUST_SHARE, percent
from bakeoff.measure.environment import OTHER_WORK_SHARE
from bakeoff.report import declared, deployment
from bakeoff.report.templates import Block, Para, Table


def scores_table(decision: Decision) -> Table:
    criteria = list(decision.weights)
    best = {f.label for f in decision.ranking}
    header = ["configuration", "score", *criteria]
    rows = []
    for cs in sorted(decision.configs, key=lambda c: -c.score):
        mark = " ◀ judged by" if cs.label in best else ""
        parts = [fmt(cs.parts[c], 2) if cs.parts.get(c) is not None else "—" for c in criteria]
        rows.append([cs.label + mark, f"{cs.score:.3f}", *parts])
    notes = ["Each criterion is scaled to 0..1 against the best configuration (higher-better: v/best, lower-better: "
             "best/v; not reaching the target in most runs scores 0); a framework is judged by its best "
             "configuration (◀)."]
    return Table(header, rows, notes)


def weights_table(decision: Decision, qualitative: Qualitative) -> Table:
    rows = []
    for c, given in decision.given.items():
        if c in CRITERIA:
            kind, what = "measured", CRITERIA[c].description
        elif c in deployment.CRITERIA:
            scores = {cfg.framework: cfg.parts.get(c) for cfg in decision.configs}
            kind, what = "measured (deployment)", f"{deployment.CRITERIA[c]}, 5 x best/v, /5: " + ", ".join(
                f"{display_name(fw)} {5 * v:.2g}" for fw, v in sorted(scores.items()) if v is not None)
        elif c in declared.CRITERIA and c not in qualitative:
            kind, what = declared.describe(c, decision)
        else:
            kind, what = "qualitative", "your score 0..5 per framework, /5: " + ", ".join(
                f"{display_name(fw)} {v:g}" for fw, v in sorted(qualitative.get(c, {}).items()))
        if c in decision.weights:
            used = f"{decision.weights[c]:.3f}"
        elif c in decision.excluded and given > 0:
            used = f"0 (excluded: {decision.excluded[c]})"
        else:
            used = "0"
        rows.append([c, kind, what, f"{given:g}", used])
    return Table(["criterion", "kind", "what it scores", "weight given", "weight used (normalised)"], rows,
                 align="lllrr")


def robustness_blocks(decision: Decision) -> list[Block]:
    if not decision.sensitivity:
        return [Para("No sensitivity analysis: fewer than two frameworks have a score.")]
    shares = ", ".join(f"{display_name(fw)} leads in {percent(share)}" for fw, share in
                       sorted(decision.win_share.items(), key=lambda kv: -kv[1]))
    if decision.provisional and decision.runs:
        why = f"not robust: fewer than {MIN_RUNS} runs on a side (n = {decision.runs[0]} vs {decision.runs[1]})."
        if min(decision.runs) < 2:
            return [Para(f"No joint resampling: one run on a side has no spread to draw from. The verdict is {why}"),
                    _sensitivity_table(decision)]
    elif decision.robust:
        why = (f"robust: the leader leads in at least {ROBUST_SHARE:.0%} of them, its lead holds with every interval "
               f"at {ROBUST_CONFIDENCE:.0%}, no more than a third of either side's runs failed, none was measured on "
               "a busy machine, and it leads under every single weight halved or doubled.")
    elif any(decision.busy):
        why = (f"not robust {BUSY_MARK}: {decision.busy[0]} of the leader's and {decision.busy[1]} of the "
               f"runner-up's runs were measured while other processes used more than {OTHER_WORK_SHARE:.0%} of "
               "their cores (their timings are suspect, so no share of draws over them is evidence); `bakeoff run "
               "--retry-busy` measures them again.")
    else:
        why = (f"not robust: that needs a winner leading in at least {ROBUST_SHARE:.0%} of them, its lead holding "
               f"with every interval at {ROBUST_CONFIDENCE:.0%}, no more than a third of either side's runs failed, "
               "none measured on a busy machine, and every single weight halved or doubled.")
    joint = Para(f"Noise and weights together, over {decision.resamples:,} joint draws (for every configuration and "
                 "measured criterion, a plausible value from its runs: their geometric mean with Student-t noise of "
                 "its standard error, as the intervals assume; each weight scaled by its own log-uniform factor "
                 f"in [½, 2]): {shares}. The verdict is {why}" if shares else
                 "No joint resampling: there is no head-to-head comparison.")
    return [joint, _sensitivity_table(decision)]


def _sensitivity_table(decision: Decision) -> Table:
    def who(framework: str | None) -> str:
        return display_name(framework) if framework else "—"

    rows = [[r.criterion, f"{r.weight:.3f}", who(r.winner_if_zero), who(r.winner_if_halved),
             who(r.winner_if_doubled), f"×{r.flips_at:g} → {who(r.flips_to)}" if r.flips_at is not None else "never"]
            for r in decision.sensitivity]
    grid = "0, 0.1, 0.25, 0.5, 0.75, 1.25, 1.5, 2, 3 … 10"
    flips = any(r.winner_if_halved != decision.ranking[0].framework
                or r.winner_if_doubled != decision.ranking[0].framework for r in decision.sensitivity)
    notes = [f"One weight scaled at a time, the others fixed, then renormalised. \"flips at\": the multiplier "
             f"nearest ×1 on the grid {grid} at which another framework leads. "
             + ("Some weight halved or doubled changes the leader." if flips
                else "No single weight halved or doubled changes the leader.")]
    return Table(["criterion", "weight", "leader if ×0", "leader if ×0.5", "leader if ×2", "flips at"], rows, notes,
                 align="lrllll")

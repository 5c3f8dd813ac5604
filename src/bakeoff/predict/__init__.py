"""Parent side, no framework imported: what bakeoff predicts rather than measures — the capacity plan and its
mixed-precision recipes, claims as hypotheses over measured quantities, and the criteria a team declares."""

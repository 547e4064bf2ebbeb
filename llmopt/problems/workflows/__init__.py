"""The workflow layer: what runs problems and policies together, above both (the solve with
its heuristic incumbents and the replay of its plan, the comparison of schedules, the bounds
that start from replays). Problems' models and solvers import none of it."""

"""The stages of a research run, one module (or, for the answer, one package) per `StageName`.

Each has a `STAGE` and a `run(ctx) -> Outcome`; the run loop (`research/pipeline/run.py`) calls
them in turn. A stage imports the shared tools of `research/pipeline/`, never another stage
(`make lint`'s import contract).
"""

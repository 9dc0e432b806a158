"""The streaming service: Faust as the runtime (runtime.py) around plain code (app.py)."""

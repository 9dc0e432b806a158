"""The streaming service: Faust wiring (app.py) around pure routing and deciding steps."""

"""`transduce serve`: an HTTP API (FastAPI under uvicorn) with batching across requests, limits
answered with their status codes, Prometheus metrics, and a page to translate and see attention.

app.py (the app) routes.py (endpoints) schemas.py (JSON) batcher.py (queue and decoding worker)
engine.py (the model's work) limits.py (bad input, sizes) metrics.py settings.py page.py server.py
load.py (a bounded load generator, for the load test and benchmarks/serve_load.py)
"""

"""The read-only web view of a swarm (README "Web view"): app.py, pages.py, source.py."""

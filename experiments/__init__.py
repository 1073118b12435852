"""Reproductions of the papers' experiments (the ``recrawl experiments`` commands)."""

"""Judges made of other judges: jury and consensus (``ensemble``), cached (``cache``) and tiered (``tiered``)."""

__all__: list[str] = []

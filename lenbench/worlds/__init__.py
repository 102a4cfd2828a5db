"""Worlds shipped with lenbench: generated samples that travel with the package.

`shipped.py` reads a world's folder (`lenbench/worlds/<name>/`: `samples.parquet` and
`card.json`) and checks it against its card; `pack.py` packs a finished generate stage into one.
"""

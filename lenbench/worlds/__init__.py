"""Worlds shipped with lenbench: generated samples that travel with the package.

`shipped.py` reads a world's folder (`lenbench/worlds/<name>/`: `samples.parquet` and
`card.json`) and checks it against its card; `pack.py` packs a finished generate stage into one.
`sample_store.py` keeps every sample generated here across runs, so a world grows instead of being
rebuilt; a shipped world seeds the same lookup.
"""

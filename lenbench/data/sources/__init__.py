"""Real prompt sources: ShareGPT, Alpaca, LMSYS-Chat-1M and bring-your-own JSON Lines.

Each reads a hub data set through `datasets.load_dataset`, or a local file or folder named by
`dataset.path`, and yields prompts plus a counted `Rejected` for every row it drops.
"""

from lenbench.data.sources.alpaca import alpaca_source
from lenbench.data.sources.jsonl import jsonl_source
from lenbench.data.sources.lmsys import lmsys_source
from lenbench.data.sources.reading import SourceError
from lenbench.data.sources.sharegpt import sharegpt_source

BUILTIN_SOURCES = {"sharegpt": sharegpt_source, "alpaca": alpaca_source,
                   "lmsys": lmsys_source, "jsonl": jsonl_source}

__all__ = ["BUILTIN_SOURCES", "SourceError", "alpaca_source", "jsonl_source", "lmsys_source",
           "sharegpt_source"]

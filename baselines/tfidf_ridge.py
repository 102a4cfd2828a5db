"""TF-IDF + ridge regression: output length from the prompt's words alone.

Needs no target model and no features, so it runs on imported length traces as well as on
generated labels; it is the text-only reference that a model-internal predictor must beat.
Word uni- and bigrams (sublinear TF-IDF) feed a ridge regression on log1p(L): lengths are
heavy-tailed, and fitting in log space keeps a few very long answers from dominating.
"""

from __future__ import annotations

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import Ridge

from lenbench import Needs, Predictor


class TfidfRidgePredictor(Predictor):
    needs = Needs(text=True)

    def __init__(self, alpha: float = 1.0, ngram_max: int = 2, min_df: int = 1,
                 max_features: int | None = 100_000, max_length: int | None = None):
        if ngram_max < 1:
            raise ValueError(f"tfidf_ridge.ngram_max must be >= 1, not {ngram_max}")
        self.alpha = alpha
        self.ngram_max = ngram_max
        self.min_df = min_df
        self.max_features = max_features
        self.max_length = max_length  # clip here (the generation budget); None: longest seen

    def fit(self, train, val=None) -> None:
        self.vectorizer = TfidfVectorizer(ngram_range=(1, self.ngram_max), min_df=self.min_df,
                                          max_features=self.max_features, sublinear_tf=True)
        x = self.vectorizer.fit_transform(train.prompts)  # [n_train, vocab], sparse
        lengths = train.lengths.astype(float)
        self.upper = float(self.max_length if self.max_length is not None else lengths.max())
        y = np.log1p(lengths)
        self.ridge = Ridge(alpha=self.alpha).fit(x, y)

    def predict(self, split) -> np.ndarray:
        log_len = self.ridge.predict(self.vectorizer.transform(split.prompts))
        return np.clip(np.expm1(log_len), 1.0, self.upper)

    def num_parameters(self) -> int:
        return int(self.ridge.coef_.size) + 1

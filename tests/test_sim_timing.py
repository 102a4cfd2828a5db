"""Time models: published table values, extrapolation, calibration by least squares."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lenbench.sim import (
    A100_LLAMA3_8B,
    H100_LLAMA3_8B,
    LinearTimeModel,
    SimConfig,
    TimeModel,
    calibrate,
    get_time_model,
)


def test_a100_table_values() -> None:
    # lin(1) + gamma * C + overhead at the spec's constants.
    assert float(A100_LLAMA3_8B.decode_ms(1, 0)) == pytest.approx(9.70 + 1.0)
    assert float(A100_LLAMA3_8B.decode_ms(256, 100_000)) == pytest.approx(19.49 + 10.0 + 1.0)
    # Between table points: linear interpolation (64 -> 11.23, 128 -> 13.18).
    assert A100_LLAMA3_8B.lin_ms(96) == pytest.approx((11.23 + 13.18) / 2)
    # Past the table: continue the last segment's slope.
    slope = (75.14 - 34.64) / 512
    assert A100_LLAMA3_8B.lin_ms(2048) == pytest.approx(75.14 + slope * 1024)
    assert float(H100_LLAMA3_8B.decode_ms(1, 0)) == pytest.approx(5.60 + 1.0)


def test_decode_is_vectorised_over_context() -> None:
    ctx = np.array([0, 1000, 2000])
    out = A100_LLAMA3_8B.decode_ms(32, ctx)
    np.testing.assert_allclose(np.diff(out), 1000 * 1.0e-4)
    alpha, beta = A100_LLAMA3_8B.decode_affine(32)
    np.testing.assert_allclose(out, alpha + beta * ctx)


def test_prefill_has_attention_term() -> None:
    base = A100_LLAMA3_8B.prefill_ms(1024, 0.0)
    assert A100_LLAMA3_8B.prefill_ms(1024, 1024.0**2) == pytest.approx(base + 1.3e-6 * 1024**2)


def test_protocol_and_lookup() -> None:
    for model in (A100_LLAMA3_8B, H100_LLAMA3_8B, LinearTimeModel(1, 2, 3)):
        assert isinstance(model, TimeModel)
    assert get_time_model("h100") is H100_LLAMA3_8B
    lin = get_time_model("linear", (5.0, 0.1, 1e-4))
    assert float(lin.decode_ms(10, 1000)) == pytest.approx(5.0 + 1.0 + 0.1)
    with pytest.raises(ValueError):
        get_time_model("tpu")
    assert SimConfig(time_model="linear", linear_abc=(5.0, 0.1, 1e-4)).linear_abc is not None


def test_calibrate_recovers_coefficients() -> None:
    rng = np.random.default_rng(0)
    a, b, c = 8.5, 0.045, 1.2e-4
    batch = rng.integers(1, 257, size=200).astype(float)
    ctx = batch * rng.uniform(50, 2000, size=200)
    ms = a + b * batch + c * ctx
    exact = calibrate(list(zip(batch, ctx, ms)))
    assert (exact.a, exact.b, exact.c) == pytest.approx((a, b, c), rel=1e-9)
    noisy = calibrate(list(zip(batch, ctx, ms + rng.normal(0, 0.05, size=200))))
    assert noisy.a == pytest.approx(a, abs=0.05)
    assert noisy.b == pytest.approx(b, rel=0.05)
    assert noisy.c == pytest.approx(c, rel=0.05)


def test_calibrate_from_csv(tmp_path: Path) -> None:
    path = tmp_path / "measured.csv"
    rows = [(1, 100, 10.01), (8, 4000, 10.68), (64, 20000, 14.0), (256, 90000, 29.0),
            (32, 64000, 17.04)]
    path.write_text("B,C,ms\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")
    from_csv = calibrate(path)
    from_rows = calibrate(rows)
    assert (from_csv.a, from_csv.b, from_csv.c) == pytest.approx(
        (from_rows.a, from_rows.b, from_rows.c))
    assert from_csv.name == "calibrated"


def test_calibrate_rejects_degenerate_data() -> None:
    with pytest.raises(ValueError):
        calibrate([(1, 10, 5.0), (2, 20, 6.0)])
    # Context proportional to batch: b and c are not separable.
    with pytest.raises(ValueError):
        calibrate([(b, 100 * b, 5 + b) for b in (1, 2, 4, 8)])

"""Length-grouped batching: longest first, padded width x rows within the budget."""

from lenbench.runtime.batching import length_batches, pad_right


def test_batches_respect_the_padded_budget_and_cover_every_row_once() -> None:
    lengths = [5, 40, 12, 40, 3, 100, 7]
    batches = length_batches(lengths, batch_tokens=80)
    assert batches[0] == [5]  # longer than the budget: alone
    assert batches[1] == [1, 3]  # 2 x 40 = 80 fits, ties keep their order
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches[1:]:
        assert max(lengths[i] for i in b) * len(b) <= 80


def test_pad_right_masks_the_padding() -> None:
    ids, mask = pad_right([[4, 5, 6], [7]])
    assert ids.tolist() == [[4, 5, 6], [7, 0, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]

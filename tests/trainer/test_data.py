import pytest
import torch

from trainer.data import BatchStream, pack
from trainer.schedule import lr_at


def test_pack_concatenates_documents_with_eos_into_full_rows():
    ids, mask = pack([[1, 2, 3], [4, 5], [6, 7, 8, 9]], seq_len=4, eos=0, pad_last=False)
    # stream: 1 2 3 0 4 5 0 6 7 8 9 0 -> three full rows
    assert ids.tolist() == [[1, 2, 3, 0], [4, 5, 0, 6], [7, 8, 9, 0]]
    assert mask.sum().item() == 12


def test_pack_pads_and_masks_the_last_row_when_asked():
    ids, mask = pack([[1, 2, 3, 4, 5]], seq_len=4, eos=0, pad_last=True)
    assert ids.tolist() == [[1, 2, 3, 4], [5, 0, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    short, short_mask = pack([[7]], seq_len=4, eos=0, pad_last=False)
    assert short.tolist() == [[7, 0, 0, 0]] and short_mask.tolist() == [[1, 1, 0, 0]]


def test_batch_stream_resumes_exactly_from_its_position():
    ids = torch.arange(70).view(10, 7)
    mask = torch.ones_like(ids)
    straight = BatchStream(ids, mask, micro_batch_size=3, seed=5)
    seen = [straight.next()[0] for _ in range(9)]  # crosses two epoch boundaries
    first = BatchStream(ids, mask, micro_batch_size=3, seed=5)
    for _ in range(4):
        first.next()
    resumed = BatchStream(ids, mask, micro_batch_size=3, seed=5)
    resumed.seek(first.position())
    for expected in seen[4:]:
        assert torch.equal(resumed.next()[0], expected)
    # every row appears exactly once per epoch
    epoch = torch.cat(seen)[:10, 0].tolist()
    assert sorted(epoch) == list(range(0, 70, 7))


def test_schedule_warms_up_then_decays_to_the_floor():
    lrs = [lr_at(s, base_lr=1.0, total_steps=20, warmup_steps=5, min_ratio=0.1) for s in range(21)]
    assert lrs[:5] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:], strict=False))
    assert lrs[20] == pytest.approx(0.1)
    assert lr_at(15, base_lr=2.0, total_steps=20, warmup_steps=5, kind="constant") == 2.0
    with pytest.raises(ValueError, match="unknown schedule"):
        lr_at(0, base_lr=1.0, total_steps=1, warmup_steps=0, kind="linear")

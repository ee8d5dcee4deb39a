"""TagSegmenter on a real (tiny, offline) byte-level BPE tokenizer, and WholeSegmenter."""

import pytest
import torch

from slca_lightning.models.tiny import build_tiny_tokenizer
from slca_lightning.segmenters import (
    TagSegmenter,
    WholeSegmenter,
    check_partition,
    token_char_spans,
)
from slca_lightning.types import RolloutBatch


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def batch_of(tok, turns):
    """One row: a 3-token fake prompt, then each turn's ids with a 2-token gap (mask 0)."""
    ids, mask = [1, 2, 3], [False] * 3
    for text in turns:
        part = tok.encode(text)
        ids += [*part, 4, 5]
        mask += [True] * len(part) + [False, False]
    t = len(ids)
    return RolloutBatch(
        input_ids=torch.tensor([ids]),
        attention_mask=torch.ones(1, t, dtype=torch.bool),
        assistant_mask=torch.tensor([mask]),
        group_ids=torch.zeros(1, dtype=torch.long),
    )


def tagged_text(tok, batch, seg, name):
    ids = batch.input_ids[0][seg.masks[name][0]].tolist()
    return tok.decode(ids)


def test_token_char_spans_rebuild_the_text_with_multibyte_chars(tok):
    text = 'café 東京 🙂 <tool_call>{"name": "x"}</tool_call>'
    ids = tok.encode(text)
    out, spans = token_char_spans(tok, ids)
    assert out == text
    assert "".join(out[s:e] for s, e in spans) == text
    assert all(s <= e for s, e in spans)


def test_tool_call_spans_are_tool_and_the_rest_is_summary(tok):
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    batch = batch_of(tok, ["Let me check. " + call, "It is sunny in Paris."])
    seg = TagSegmenter(tok)(batch)
    check_partition(seg, batch.assistant_mask)
    assert tagged_text(tok, batch, seg, "tool").strip() == call
    summary = tagged_text(tok, batch, seg, "summary")
    assert "Let me check." in summary and "It is sunny in Paris." in summary
    assert seg.present["tool"].tolist() == [True]


@pytest.mark.parametrize("think", ["tool", "summary"])
def test_think_blocks_follow_the_setting(tok, think):
    batch = batch_of(tok, ["<think>plan it</think>Answer: 42."])
    seg = TagSegmenter(tok, think=think)(batch)
    assert "plan it" in tagged_text(tok, batch, seg, think)
    assert "Answer" in tagged_text(tok, batch, seg, "summary")


def test_unclosed_tool_call_runs_to_end_of_turn(tok):
    batch = batch_of(tok, ['ok <tool_call>{"name": "f", "argu'])
    seg = TagSegmenter(tok)(batch)
    assert tagged_text(tok, batch, seg, "tool").startswith("<tool_call>")
    assert tagged_text(tok, batch, seg, "summary").strip() == "ok"


def test_tag_segmenter_without_tokenizer_says_so():
    batch = RolloutBatch(
        input_ids=torch.zeros(1, 2, dtype=torch.long),
        attention_mask=torch.ones(1, 2, dtype=torch.bool),
        assistant_mask=torch.ones(1, 2, dtype=torch.bool),
        group_ids=torch.zeros(1, dtype=torch.long),
    )
    with pytest.raises(ValueError, match="needs a tokenizer"):
        TagSegmenter()(batch)
    with pytest.raises(ValueError, match="think must be"):
        TagSegmenter(think="elsewhere")


def test_whole_segmenter_is_one_segment(tok):
    batch = batch_of(tok, ["a", "b"])
    seg = WholeSegmenter()(batch)
    assert set(seg.masks) == {"whole"}
    assert torch.equal(seg.masks["whole"], batch.assistant_mask)
    check_partition(seg, batch.assistant_mask)

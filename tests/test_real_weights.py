"""Real weights: greedy token identity (SmolLM2 F32 target + Q4_1 draft) and KV-cache rollback."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from test_kv_cache import assert_cache_matches_fresh_model

from localspec.app.session import Session
from localspec.engine.drafters import ModelDrafter
from localspec.engine.generation import Generation, generate_text
from localspec.runtime.model import Model
from localspec.settings import GenerationSettings, SamplingParams, SpeculativeParams

pytestmark = pytest.mark.slow

PROMPTS = [
    "Why is the sky blue?",
    "Write a Python function that checks whether a number is prime.",
    "List five European capitals and one fact about each.",
    "Tell a short story about a lighthouse keeper.",
    "Explain the difference between a list and a tuple.",
    "What is 17 times 23? Show your steps.",
]
GREEDY = SamplingParams(temperature=0)


@pytest.fixture(scope="module")
def demo_session(smollm_f32: Path, smollm_q4_1: Path):
    with Session(Model(smollm_f32), Model(smollm_q4_1, proposes_only=True)) as session:  # (the draft as a session loads it)
        yield session
        _TARGET_ONLY.clear()  # the next session's models are other objects


_TARGET_ONLY: dict[tuple, Generation] = {}


def target_only(session: Session, tokens: list[int], settings: GenerationSettings) -> Generation:
    """The target alone on `tokens`, remembered per prompt and settings (drafting aside): the tests here compare
    many drafting settings with the same few baselines, which were most of the slow suite's time."""
    key = (tuple(tokens), dataclasses.replace(settings, speculative=SpeculativeParams()))
    if key not in _TARGET_ONLY:
        _TARGET_ONLY[key] = generate_text(session.target, tokens, settings)
    return _TARGET_ONLY[key]


@pytest.mark.parametrize("draft_max", [3, 8])
def test_greedy_speculative_equals_target_only_token_for_token(demo_session: Session, draft_max: int) -> None:
    total_rejections = 0
    for prompt in PROMPTS:
        tokens = demo_session.chat_prompt_tokens([{"role": "user", "content": prompt}])
        settings = GenerationSettings(GREEDY, SpeculativeParams(draft_max=draft_max), max_tokens=64, seed=0)
        baseline = target_only(demo_session, tokens, settings)
        speculative = generate_text(
            demo_session.target, tokens, settings, ModelDrafter(demo_session.draft, GREEDY)
        )
        assert speculative.tokens == baseline.tokens, prompt
        assert speculative.text == baseline.text
        assert speculative.stats.target_passes < baseline.stats.target_passes
        total_rejections += speculative.stats.draft_tokens_proposed - speculative.stats.draft_tokens_accepted
    assert total_rejections > 0  # the identity held through rejections, not only easy agreement


def test_kv_rollback_on_real_weights(demo_session: Session, smollm_f32: Path) -> None:
    sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    tokens = demo_session.chat_prompt_tokens([{"role": "user", "content": "Say something surprising."}])
    for seed in range(11, 16):  # until a run rejects drafts (most do)
        settings = GenerationSettings(sampling, SpeculativeParams(draft_max=6), max_tokens=48, seed=seed)
        generation = generate_text(demo_session.target, tokens, settings, ModelDrafter(demo_session.draft, sampling))
        if generation.stats.draft_tokens_accepted < generation.stats.draft_tokens_proposed:
            break
    assert generation.stats.draft_tokens_accepted < generation.stats.draft_tokens_proposed
    # The cache holds the prompt and generated tokens (plus accepted drafts), nothing rejected.
    context = [*tokens, *generation.tokens]
    assert list(demo_session.target.tokens) == context[: len(demo_session.target.tokens)]
    # Every target pass is a batch (padded where a lone token is computed otherwise), as a fresh model's
    # reading is: the logits agree to rounding.
    assert_cache_matches_fresh_model(demo_session.target, smollm_f32)


def test_same_seed_same_output(demo_session: Session) -> None:
    tokens = demo_session.chat_prompt_tokens([{"role": "user", "content": "Name a colour."}])
    settings = GenerationSettings(SamplingParams(temperature=0.9), max_tokens=24, seed=42)
    runs = [
        generate_text(demo_session.target, tokens, settings, ModelDrafter(demo_session.draft, settings.sampling)).tokens
        for _ in range(2)
    ]
    assert runs[0] == runs[1]


def test_context_full_is_a_clean_length_stop(smollm_f32: Path, smollm_q4_1: Path) -> None:
    from localspec.settings import ModelSettings

    small = ModelSettings(n_ctx=64)
    with Session(Model(smollm_f32, small), Model(smollm_q4_1, small)) as session:
        tokens = session.raw_prompt_tokens("Once upon a time, in a land far away,")
        generation = session.generation(tokens, GenerationSettings(GREEDY, max_tokens=500, seed=0))
        for _ in generation:
            pass
        n_ctx = session.target.n_ctx  # llama.cpp may round the requested size up
        padded = session.target.pads_a_lone_token  # (then the last position is kept for a padded pass's second row)
    assert n_ctx < 500 and generation.stop_reason == "length"
    assert len(tokens) + len(generation.tokens) == n_ctx + 1 - padded  # the last token is emitted, never fed


def test_end_of_generation_token_stops_with_eos(demo_session: Session) -> None:
    tokens = demo_session.chat_prompt_tokens([{"role": "user", "content": "Reply with just the word: yes"}])
    generation = generate_text(
        demo_session.target, tokens, GenerationSettings(GREEDY, max_tokens=200, seed=0), ModelDrafter(demo_session.draft, GREEDY)
    )
    assert generation.stop_reason == "eos"
    assert not any(demo_session.target.is_end_of_generation(t) for t in generation.tokens)


@pytest.mark.parametrize("strategy", ["ngram", "hybrid"])
@pytest.mark.parametrize("draft_max", [4, "adaptive"])
def test_greedy_lookup_strategies_equal_target_only_token_for_token(demo_session: Session, strategy: str, draft_max) -> None:
    from localspec.app.bench import COPY_HEAVY_PROMPTS

    looked_up = 0
    for prompt in [*PROMPTS[:3], *COPY_HEAVY_PROMPTS[:2]]:
        tokens = demo_session.chat_prompt_tokens([{"role": "user", "content": prompt}])
        settings = GenerationSettings(GREEDY, SpeculativeParams(strategy=strategy, draft_max=draft_max), max_tokens=64, seed=0)
        baseline = target_only(demo_session, tokens, settings)
        drafted = demo_session.generation(tokens, settings)
        for _ in drafted:
            pass
        assert drafted.tokens == baseline.tokens, prompt
        looked_up += drafted.stats.draft_tokens_accepted
    assert looked_up > 5  # the copy-heavy prompts really were drafted by lookup (adaptive lengths vary with timing)


def _batch_invariant() -> bool:
    from localspec.runtime.devices import build_info

    return build_info()["cpu_batch_invariant"]


def test_a_token_is_computed_alike_alone_and_in_a_batch_exactly_where_info_says_so(demo_session: Session) -> None:
    target = demo_session.target
    context = demo_session.chat_prompt_tokens([{"role": "user", "content": PROMPTS[0]}]) + list(range(1000, 1012))
    target.clear()
    target.sync(context[:-9])
    alone = np.stack([target.eval([token], logits="last")[0] for token in context[-9:]])
    target.clear()
    target.sync(context[:-9])
    batched = target.eval(context[-9:], logits="all")
    assert np.array_equal(alone, batched) == _batch_invariant()


@pytest.mark.parametrize("temperature", [0.8, 1.0])
@pytest.mark.parametrize(
    "speculative",
    [SpeculativeParams(), SpeculativeParams(strategy="model", draft_max=8), SpeculativeParams(strategy="ngram", draft_max=3)],
    ids=["shipped-hybrid-adaptive", "model-8", "ngram-3"],
)
def test_coupled_speculative_text_equals_target_only_at_temperature(
    demo_session: Session, temperature: float, speculative: SpeculativeParams
) -> None:
    """Coupled verification on the F32 target: the same seed gives the same tokens with or without drafting."""
    from localspec.app.bench import COPY_HEAVY_PROMPTS

    rejected = 0
    for seed, prompt in enumerate([*PROMPTS, COPY_HEAVY_PROMPTS[0]]):
        tokens = demo_session.chat_prompt_tokens([{"role": "user", "content": prompt}])
        settings = GenerationSettings(SamplingParams(temperature=temperature), speculative, max_tokens=64, seed=100 + seed)
        baseline = target_only(demo_session, tokens, settings)
        drafted = demo_session.generation(tokens, settings)
        for _ in drafted:
            pass
        assert drafted.tokens == baseline.tokens, prompt
        assert drafted.stats.target_passes < baseline.stats.target_passes or speculative.strategy == "ngram"
        rejected += drafted.stats.draft_tokens_proposed - drafted.stats.draft_tokens_accepted
    assert rejected > 0


def test_constrained_output_is_identical_with_and_without_speculation(demo_session: Session) -> None:
    """Under a JSON schema, coupled verification: the same seed gives the same tokens, and every output validates."""
    import json

    import jsonschema

    from localspec.app.structured_set import structured_set
    from localspec.engine.generation import StopReason
    from localspec.engine.grammar import compile_format

    rejected = forced = 0
    for seed, case in enumerate(structured_set(limit=4)):
        grammar = compile_format(case.output_format()).grammar
        tokens = demo_session.chat_prompt_tokens([{"role": "user", "content": case.prompt}])
        settings = GenerationSettings(SamplingParams(temperature=0.8), SpeculativeParams(), max_tokens=400, seed=seed)
        baseline = generate_text(demo_session.target, tokens, settings, grammar=grammar)
        drafted = demo_session.generation(tokens, settings, grammar=grammar)
        for _ in drafted:
            pass
        assert drafted.tokens == baseline.tokens, case.name
        assert drafted.stop_reason is StopReason.EOS, case.name
        jsonschema.validate(json.loads(drafted.text), case.schema)
        assert drafted.stats.target_passes < baseline.stats.target_passes
        rejected += drafted.stats.draft_tokens_proposed - drafted.stats.draft_tokens_accepted
        forced += baseline.stats.forced_tokens
    assert forced > 0  # the schemas forced text (keys, punctuation) ...
    assert rejected > 0  # ... and left choices where drafts were rejected


def held_output_text(session: Session, schema: dict, prompt: str, max_tokens: int = 200) -> str:
    """The demo target's T=0 answer to `prompt` held to `schema`, all of which localspec holds (no warning): the
    same tokens with and without speculation."""
    import json

    from localspec.engine.grammar import OutputFormat, compile_format

    compiled = compile_format(OutputFormat("json_schema", json.dumps(schema)))
    assert compiled.warnings == ()
    tokens = session.chat_prompt_tokens([{"role": "user", "content": prompt}])
    settings = GenerationSettings(GREEDY, SpeculativeParams(), max_tokens=max_tokens)
    baseline = generate_text(session.target, tokens, settings, grammar=compiled.grammar)
    drafted = session.generation(tokens, settings, grammar=compiled.grammar)
    for _ in drafted:
        pass
    assert drafted.tokens == baseline.tokens
    return drafted.text


def held_unique_output(session: Session, schema: dict, prompt: str) -> dict:
    """`held_output_text`, parsed, and valid against the schema."""
    import json

    import jsonschema

    output = json.loads(held_output_text(session, schema, prompt))
    jsonschema.validate(output, schema)
    return output


def test_unique_string_items_hold_where_the_model_would_repeat_one(demo_session: Session) -> None:
    """At T=0 the demo target lists "baking" six times as a recipe's tags; held to uniqueItems it writes
    distinct tags, the same with and without speculation, and the output validates."""
    schema = {"type": "object", "required": ["name", "tags"],
              "properties": {"name": {"type": "string"},
                             "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "minItems": 3}}}
    prompt = "Give a sourdough bread recipe's name and tags as JSON. Tags: baking, sourdough, baking, bread."
    tags = held_unique_output(demo_session, schema, prompt)["tags"]
    assert "baking" in tags and len(tags) >= 3


@pytest.mark.parametrize("bounds", [{}, {"minimum": 1, "maximum": 49}])
def test_unique_integer_items_hold_where_the_model_would_repeat_one(demo_session: Session, bounds: dict) -> None:
    """At T=0 the demo target picks lottery numbers `[7, 7, 13, 21, 7, 42]`; held to uniqueItems, distinct ones,
    the same with and without speculation, with or without bounds (under `maximum: 49` a second 7 cannot be led
    on to 70)."""
    schema = {"type": "object", "required": ["numbers"], "properties": {"numbers": {
        "type": "array", "items": {"type": "integer", **bounds}, "uniqueItems": True, "minItems": 6, "maxItems": 6}}}
    numbers = held_unique_output(demo_session, schema,
                                 "Pick six lottery numbers for Saturday's draw, for example 7, 7, 13, 21, 7, 42.")["numbers"]
    assert 7 in numbers


def test_unique_number_items_hold_where_the_model_would_repeat_one(demo_session: Session) -> None:
    """At T=0 the demo target lists prices `[1.5, 2.25, 3.0, 2.25]`; held to uniqueItems, the fourth differs (2.25
    cannot end there as written again), the same with and without speculation."""
    schema = {"type": "object", "required": ["prices"], "properties": {"prices": {
        "type": "array", "items": {"type": "number"}, "uniqueItems": True, "minItems": 4, "maxItems": 4}}}
    prices = held_unique_output(demo_session, schema, "List four prices as JSON, for example 1.5, 2.25, 1.5, 3.0.")["prices"]
    assert 2.25 in prices and len(set(prices)) == 4


def repeated_key(text: str) -> str | None:
    """The first key written twice in one object of a JSON text (whole or cut short), else None: read apart from
    localspec's cursor, strings by the json module."""
    import json

    objects: list[set[str] | None] = []  # each open container: an object's keys so far, None for an array
    key_next, at = False, 0
    while at < len(text):
        if text[at] == '"':
            try:
                string, at = json.decoder.scanstring(text, at + 1)
            except ValueError:  # (cut short inside a string)
                return None
            if key_next:
                if string in objects[-1]:
                    return string
                objects[-1].add(string)
            key_next = False
            continue
        if text[at] in "{[":
            objects.append(set() if text[at] == "{" else None)
            key_next = text[at] == "{"
        elif text[at] in "]}":
            objects.pop()
        elif text[at] == ",":
            key_next = objects[-1] is not None
        at += 1
    return None


def test_keys_hold_where_the_model_would_repeat_one(demo_session: Session) -> None:
    """At T=0, asked for any JSON object, the demo target writes `"looks_like_a_frog": …` again and again in one
    object; held, every object's keys differ, the same tokens with and without speculation."""
    text = held_output_text(demo_session, {"type": "object"}, "Describe a cat as a JSON object.", max_tokens=240)
    assert text.count('"') > 30 and repeated_key(text) is None
    assert repeated_key('{"a": {"b": 1, "c": [{"b": 2}]}, "b": 3, "a"') == "a"  # (the check itself)


def test_a_word_has_one_form_with_or_without_the_space_before_it(demo_session: Session) -> None:
    """SmolLM2 spells `The` at the start of an answer unlike ` The` mid-sentence; lookups compare the two alike."""
    target = demo_session.target

    def only_token(text: str) -> int:
        tokens = target.tokenize(text, add_special=False)
        assert len(tokens) == 1, (text, tokens)
        return tokens[0]

    assert only_token("The") != only_token(" The")
    assert target.word_form(only_token("The")) == target.word_form(only_token(" The")) == only_token(" The")
    assert target.word_form(only_token("\n")) == only_token("\n")  # (not a word: itself)
    end = target.tokenize("<|im_end|>", add_special=False, parse_special=True)[0]
    assert target.word_form(end) == end


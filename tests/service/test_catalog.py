"""The built-in model catalog: the shipped file is valid entry by entry, says what its sources say, and is
matched as docs/configuration.md#the-built-in-catalog describes."""

from __future__ import annotations

import pytest

from attachstore.service.catalog import Catalog, CatalogError, Entry, builtin, forms

# The digest of each released catalog version: an entry changed without a new `version` fails here (a store's
# policy names the catalog by version, docs/configuration.md#one-policy-per-store).
DIGESTS = {"2026-12-01": "sha256:6da482ef99a31e1a499bc81633b1f531918638a19bd884c920e0b648056dc15d"}

# The patterns with a short prefix that take images: each is a claim about a whole family, made because its
# vendor (the entry's source) says so of the family. A new one needs such a statement, and a line here.
FAMILIES = {
    "claude-*": "all current Claude models support text and image input (Claude 2 and Instant excepted)",
    "gemini-*": "every Gemini chat model is multimodal (1.0 Pro, TTS and embeddings excepted)",
    "gpt-4o*": "GPT-4o is multimodal (the audio and search variants excepted)",
    "gpt-4.1*": "GPT-4.1, mini and nano take images",
    "gpt-5*": "every GPT-5 model takes images",
    "grok-4*": "Grok 4 models have vision built in",
    "o1-pro*": "o1-pro takes images (Responses only)",
    "o3-pro*": "o3-pro takes images (Responses only)",
    "o4-mini*": "o4-mini thinks with images",
    "qvq*": "QVQ is Qwen's visual reasoning line",
    "qwen-vl*": "Qwen-VL is Qwen's vision-language line",
    "qwen3.5*": "Qwen 3.5 is natively multimodal",
    "qwen3.6*": "Qwen 3.6 is natively multimodal (3.6 Max Preview excepted)",
    "glm-5v*": "GLM-5V is Z.ai's vision model",
}

# model id -> (input_modalities, provider, entry); None: unknown.
EXPECTED: dict[str, tuple[list[str], str | None, str] | None] = {
    # OpenAI
    "gpt-4o": (["text", "image"], "openai-chat", "gpt-4o*"),
    "gpt-4o-2024-08-06": (["text", "image"], "openai-chat", "gpt-4o*"),
    "gpt-4o-mini": (["text", "image"], "openai-chat", "gpt-4o*"),
    "GPT-4o": (["text", "image"], "openai-chat", "gpt-4o*"),
    "gpt-4o-audio-preview": (["text"], "openai-chat", "gpt-4o-audio*"),
    "gpt-4o-mini-search-preview": (["text"], "openai-chat", "gpt-4o-mini-search*"),
    "chatgpt-4o-latest": (["text", "image"], "openai-chat", "chatgpt-4o-latest"),
    "gpt-4.1-nano": (["text", "image"], "openai-chat", "gpt-4.1*"),
    "gpt-4-turbo-2024-04-09": (["text", "image"], "openai-chat", "gpt-4-turbo*"),
    "gpt-4-turbo-preview": (["text"], "openai-chat", "gpt-4-turbo-preview"),
    "gpt-4": (["text"], "openai-chat", "gpt-4"),
    "gpt-4-0125-preview": (["text"], "openai-chat", "gpt-4-0125-preview"),
    "gpt-3.5-turbo-0125": (["text"], "openai-chat", "gpt-3.5-turbo*"),
    "gpt-oss-120b": (["text"], "openai-chat", "gpt-oss-120b"),
    "gpt-5": (["text", "image"], "openai-chat", "gpt-5*"),
    "gpt-5.5-mini": (["text", "image"], "openai-chat", "gpt-5*"),
    "gpt-5.1-codex-mini": (["text", "image"], "openai-responses", "gpt-5.1-codex*"),
    "gpt-5.4-pro-2026-03-05": (["text", "image"], "openai-responses", "gpt-5.4-pro*"),
    "o1": (["text", "image"], "openai-chat", "o1"),
    "o1-2024-12-17": (["text", "image"], "openai-chat", "o1-2024-12-17"),
    "o1-mini-2024-09-12": (["text"], "openai-chat", "o1-mini*"),
    "o1-preview": (["text"], "openai-chat", "o1-preview*"),
    "o1-pro": (["text", "image"], "openai-responses", "o1-pro*"),
    "o3": (["text", "image"], "openai-chat", "o3"),
    "o3-mini-high": (["text"], "openai-chat", "o3-mini*"),
    "o4-mini-2025-04-16": (["text", "image"], "openai-chat", "o4-mini*"),
    "o4-mini-deep-research": (["text", "image"], "openai-responses", "o4-mini-deep-research*"),
    "o3-something-new": None,  # not a family that takes images as a whole
    "codex-mini-latest": None,
    "codex-gpt-5.2": None,  # dash prefixes are not stripped
    # Anthropic, on the API, Bedrock, Vertex and OpenRouter
    "claude-3-5-sonnet-20241022": (["text", "image"], "anthropic", "claude-*"),
    "claude-sonnet-4-5@20250929": (["text", "image"], "anthropic", "claude-*"),
    "anthropic.claude-3-5-sonnet-20241022-v2:0": (["text", "image"], "anthropic", "claude-*"),
    "us.anthropic.claude-opus-4-8": (["text", "image"], "anthropic", "claude-*"),
    "anthropic/claude-3.5-sonnet": (["text", "image"], None, "claude-*"),  # a host's path: its protocol
    "claude-2.1": (["text"], "anthropic", "claude-2*"),
    "claude-instant-1.2": (["text"], "anthropic", "claude-instant*"),
    # Google
    "gemini-2.5-flash": (["text", "image"], "gemini", "gemini-*"),
    "google/gemini-3-pro-preview": (["text", "image"], None, "gemini-*"),
    "gemini-pro": (["text"], "gemini", "gemini-pro"),
    "gemini-pro-vision": (["text", "image"], "gemini", "gemini-*"),
    "gemini-1.0-pro-002": (["text"], "gemini", "gemini-1.0-pro*"),
    "gemini-1.0-pro-vision-001": (["text", "image"], "gemini", "gemini-1.0-pro-vision*"),
    "gemini-2.5-flash-preview-tts": (["text"], "gemini", "gemini-2.5-flash-preview-tts*"),
    # DeepSeek: chat and reasoner are text-only; the V4 names are left unknown
    "deepseek-chat": (["text"], "openai-chat", "deepseek-chat"),
    "deepseek-reasoner": (["text"], "openai-chat", "deepseek-reasoner"),
    "deepseek/deepseek-r1:free": (["text"], None, "deepseek-r1*"),
    "deepseek-ai/DeepSeek-V3": (["text"], None, "deepseek-v3*"),
    "deepseek-flash": (["text", "image"], "openai-chat", "deepseek-flash*"),
    "deepseek-v4-flash": None,
    "deepseek-v4-pro": None,
    # Qwen, Llama, Mistral, xAI, Kimi, GLM
    "qwen-vl-max": (["text", "image"], "openai-chat", "qwen-vl*"),
    "qwen2.5-vl-72b-instruct": (["text", "image"], "openai-chat", "qwen2.5-vl*"),
    "Qwen/Qwen3-VL-235B-A22B-Instruct": (["text", "image"], None, "qwen3-vl*"),
    "qwen3.6-plus": (["text", "image"], "openai-chat", "qwen3.6*"),
    "qwen3.6-max-preview": (["text"], "openai-chat", "qwen3.6-max-preview"),
    "qwen3-coder-plus": (["text"], "openai-chat", "qwen3-coder*"),
    "qwen-plus": None,  # an alias that moves to newer models
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": (["text", "image"], None, "llama-4-*"),
    "llama-3.2-11b-vision-preview": (["text", "image"], "openai-chat", "llama-3.2-11b-vision*"),
    "llama-3.2-3b-preview": (["text"], "openai-chat", "llama-3.2-3b*"),
    "llama-3.3-70b-versatile": (["text"], "openai-chat", "llama-3.3-*"),
    "pixtral-large-latest": (["text", "image"], "openai-chat", "pixtral-*"),
    "mistral-small-2506": (["text", "image"], "openai-chat", "mistral-small-2506"),
    "mistral-small-2402": None,  # not every Mistral Small takes images
    "mistral-large-2411": (["text"], "openai-chat", "mistral-large-2411"),
    "grok-4-1-fast-reasoning": (["text", "image"], "openai-chat", "grok-4*"),
    "grok-2-vision-1212": (["text", "image"], "openai-chat", "grok-2-vision*"),
    "grok-3-mini": (["text"], "openai-chat", "grok-3*"),
    "grok-2-1212": (["text"], "openai-chat", "grok-2-1212"),
    "kimi-k2.6": (["text", "image"], "openai-chat", "kimi-k2.6*"),
    "kimi-k2-0905-preview": (["text"], "openai-chat", "kimi-k2-*"),
    "glm-4.5v": (["text", "image"], "openai-chat", "glm-4.5v*"),
    "glm-4.5": (["text"], "openai-chat", "glm-4.5"),
    "glm-4.5-air": None,
    "codestral-latest": (["text"], "openai-chat", "codestral-*"),
    "qwq-plus": (["text"], "openai-chat", "qwq-*"),
    "my-own-model": None,
}


def test_the_shipped_catalog_is_valid_entry_by_entry() -> None:
    catalog = builtin()
    assert catalog.version in DIGESTS
    assert len(catalog.entries) > 100
    for e in catalog.entries:
        assert e.source.startswith("https://"), e.key
        assert e.provider is not None, e.key  # every entry says what render speaks for it
        assert e.input_modalities in (["text"], ["text", "image"]), e.key


def test_an_entry_changed_without_a_new_version_fails_here() -> None:
    catalog = builtin()
    assert catalog.digest == DIGESTS[catalog.version], (
        "the catalog's entries changed: give it a new `version` and add its digest to DIGESTS"
    )


@pytest.mark.parametrize(("model", "expected"), EXPECTED.items())
def test_model_ids_resolve_as_their_vendors_say(
    model: str, expected: tuple[list[str], str, str] | None
) -> None:
    found = builtin().lookup(model)
    if expected is None:
        assert found is None, found
        return
    assert found is not None
    route = found.entry.route()
    provider = None if found.hosted else route.provider
    assert (route.input_modalities, provider, found.entry.key) == expected


def _without(entry: Entry) -> Catalog:
    catalog = builtin()
    return Catalog(catalog.version, [e for e in catalog.entries if e is not entry])


def test_no_entry_says_what_the_others_would_say_without_it() -> None:
    catalog = builtin()
    for e in catalog.entries:
        rest = _without(e)
        probe = e.id if e.id is not None else str(e.match)[:-1]
        other = rest.lookup(probe)
        same = other is not None and (other.entry.input_modalities, other.entry.provider) == (
            e.input_modalities,
            e.provider,
        )
        assert not same, f"{e.key} is redundant with {other.entry.key if other else ''}"


def test_short_image_patterns_are_the_families_their_vendors_name() -> None:
    short = {
        e.key for e in builtin().entries if e.match and "image" in e.input_modalities and len(e.key) <= 8
    }
    assert short == set(FAMILIES)


def test_text_only_patterns_are_narrow() -> None:
    """A wrong 'text' refuses people's uploads: a text-only pattern is an exception under a wider entry, or
    names one line of models (a version in it, or a prefix that ends in '-')."""
    catalog = builtin()
    for e in catalog.entries:
        if e.match is None or "image" in e.input_modalities:
            continue
        prefix = str(e.match)[:-1]
        wider = _without(e).lookup(prefix)
        assert len(prefix) >= 4, e.key
        assert wider is not None or any(c.isdigit() for c in prefix) or prefix.endswith("-"), e.key


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o", [("gpt-4o", False)]),
        ("openai/gpt-4o", [("openai/gpt-4o", False), ("gpt-4o", True)]),
        ("deepseek/deepseek-r1:free", [("deepseek/deepseek-r1:free", False), ("deepseek-r1", True)]),
        (
            "us.anthropic.claude-3-haiku-v1:0",
            [("us.anthropic.claude-3-haiku-v1:0", False), ("claude-3-haiku-v1", False)],
        ),
        ("claude-opus-4-6@default", [("claude-opus-4-6@default", False), ("claude-opus-4-6-default", False)]),
        ("gpt-4.1", [("gpt-4.1", False)]),  # a segment with a digit is part of the name
        ("qwen3.5-plus", [("qwen3.5-plus", False)]),
    ],
)
def test_the_forms_a_model_id_is_looked_up_as(model: str, expected: list[tuple[str, bool]]) -> None:
    assert forms(model) == expected


def test_an_exact_id_beats_every_pattern_and_the_longest_prefix_wins() -> None:
    text, image = ["text"], ["text", "image"]
    catalog = Catalog(
        "2026-01-01",
        [
            Entry(match="m*", input_modalities=image, source="https://a"),
            Entry(match="m-mini*", input_modalities=text, source="https://b"),
            Entry(id="m-mini-vision", input_modalities=image, source="https://c"),
        ],
    )
    assert [catalog.lookup(m).entry.source for m in ("m-1", "m-mini-2", "m-mini-vision")] == [  # type: ignore[union-attr]
        "https://a",
        "https://b",
        "https://c",
    ]
    assert catalog.lookup("x-m") is None


def _catalog(models: str) -> Catalog:
    return Catalog.parse(f'version = "2026-01-01"\n{models}')


@pytest.mark.parametrize(
    ("models", "says"),
    [
        ('[[models]]\nid = "a"\ninput_modalities = ["text"]\n', "source"),
        ('[[models]]\nid = "a"\ninput_modalities = ["text"]\nsource = "http://x"\n', "https"),
        (
            '[[models]]\nid = "a"\nmatch = "a*"\ninput_modalities = ["text"]\nsource = "https://x"\n',
            "exactly one",
        ),
        ('[[models]]\ninput_modalities = ["text"]\nsource = "https://x"\n', "exactly one"),
        ('[[models]]\nmatch = "a*b*"\ninput_modalities = ["text"]\nsource = "https://x"\n', "'a*b*'"),
        ('[[models]]\nmatch = "*"\ninput_modalities = ["text"]\nsource = "https://x"\n', "'*'"),
        ('[[models]]\nmatch = "ab"\ninput_modalities = ["text"]\nsource = "https://x"\n', "'ab'"),
        ('[[models]]\nid = "GPT"\ninput_modalities = ["text"]\nsource = "https://x"\n', "lower case"),
        ('[[models]]\nid = "a"\ninput_modalities = ["image"]\nsource = "https://x"\n', "'text'"),
        ('[[models]]\nid = "a"\ninput_modalities = []\nsource = "https://x"\n', "length"),
        (
            '[[models]]\nid = "a"\ninput_modalities = ["text"]\nprovider = "x"\nsource = "https://x"\n',
            "provider",
        ),
        ('[[models]]\nid = "a"\ninput_modalities = ["text"]\nsource = "https://x"\nnote = "n"\n', "note"),
        (
            '[[models]]\nid = "a"\ninput_modalities = ["text"]\nsource = "https://x"\n' * 2,
            "'a' is listed twice",
        ),
    ],
)
def test_a_bad_entry_is_refused_naming_it(models: str, says: str) -> None:
    with pytest.raises(CatalogError, match="catalog") as e:
        _catalog(models)
    assert says in str(e.value)


def test_a_bad_version_is_refused() -> None:
    with pytest.raises(CatalogError, match="version"):
        Catalog.parse('version = "latest"\nmodels = []\n')

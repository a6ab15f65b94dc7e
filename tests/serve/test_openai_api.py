"""The OpenAI-compatible routes with the official `openai` client against a real server.

One server per module and batching mode (tests/support/serving.py: a tiny trunk, the domains
``python_code`` and ``dom-legal`` named ``legal``, the expert ``code``, a bearer token): every
test runs on the server that runs each request alone and on the one that shares forwards.
Every answer is checked against what the existing routes (``/score``, ``/generate``) say for
the same text and experts: the two are one implementation, so their numbers must agree
exactly.
"""

from __future__ import annotations

import urllib.request

import openai
import pytest

from experts.serving import Batching
from tests.support.experts import domain_texts
from tests.support.serving import AUTH, TOKEN, tiny_served
from topology.serve.openai_format import CHAT_STOP, chat_prompt

CODE = domain_texts("python_code", 1, skip=30)[0]
PROMPT = "def add(a, b):\n    return"
MAX_NEW = 16  # the server's experts.max_new_tokens


@pytest.fixture(scope="module", params=[None, Batching()], ids=["alone", "batched"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("openai-serve")
    with tiny_served(root, max_new_tokens=MAX_NEW, batching=request.param) as s:
        yield s


@pytest.fixture(scope="module")
def client(served) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{served.url}/v1", api_key=TOKEN, max_retries=0, timeout=60)


def test_models_list_auto_each_domain_with_its_name_and_each_expert(client) -> None:
    models = {m.id: m.model_dump() for m in client.models.list()}
    assert list(models) == ["auto", "dom-legal", "python_code", "code"]
    assert all(m["object"] == "model" and m["owned_by"] == "worx" for m in models.values())
    assert models["dom-legal"]["domain_name"] == "legal"
    assert models["dom-legal"]["experts"] == [] and models["python_code"]["experts"] == ["code"]
    assert models["code"]["kind"] == "expert" and models["code"]["domain"] == "python_code"
    assert isinstance(models["code"]["created"], int)


@pytest.mark.parametrize(
    "model, experts",
    [("auto", None), ("code", {"code": 1.0}), ("python_code", {"code": 1.0}), ("legal", {})],
)
def test_echoed_prompt_logprobs_are_what_score_computes(served, client, model, experts) -> None:
    """The perplexity harness's call: max_tokens 0, echo, logprobs."""
    answer = client.completions.create(
        model=model, prompt=CODE, max_tokens=0, echo=True, logprobs=2, temperature=0
    )
    choice = answer.choices[0]
    body = {"text": CODE} if experts is None else {"text": CODE, "experts": experts}
    status, scored = served.post("/score", body)
    assert status == 200, scored
    logprobs = choice.logprobs
    assert choice.text == CODE and "".join(logprobs.tokens) == CODE
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    assert logprobs.token_logprobs[1:] == [-loss for loss in scored["token_losses"]]
    offsets = logprobs.text_offset
    assert offsets[0] == 0
    assert all(
        offsets[i + 1] == offsets[i] + len(logprobs.tokens[i]) for i in range(len(offsets) - 1)
    )
    for given, top in zip(logprobs.token_logprobs[1:], logprobs.top_logprobs[1:], strict=True):
        # top_logprobs are log-softmax values, the token's is /score's cross-entropy: 1e-5
        assert len(top) == 2 and max(top.values()) >= given - 1e-5
    assert answer.usage.prompt_tokens == len(scored["token_losses"]) + 1
    assert answer.usage.completion_tokens == 0
    assert answer.usage.total_tokens == answer.usage.prompt_tokens
    assert answer.model_extra["worx"]["experts"] == scored["experts"]


def test_the_model_changes_the_numbers(client) -> None:
    def logprobs(model: str) -> list[float]:
        answer = client.completions.create(
            model=model, prompt=CODE, max_tokens=0, echo=True, logprobs=0
        )
        return answer.choices[0].logprobs.token_logprobs[1:]

    assert logprobs("code") == logprobs("auto")  # the gate gives this text the code expert
    assert logprobs("code") != logprobs("legal")  # legal's domain has no expert: the trunk


def test_greedy_and_seeded_completions_are_generates(served, client) -> None:
    greedy = client.completions.create(model="code", prompt=PROMPT, max_tokens=12, temperature=0)
    status, generated = served.post(
        "/generate", {"text": PROMPT, "max_new_tokens": 12, "experts": {"code": 1.0}}
    )
    assert status == 200 and greedy.choices[0].text == generated["continuation"]
    assert greedy.usage.completion_tokens == generated["new_tokens"]
    params = {"temperature": 0.9, "top_p": 0.95, "seed": 11}
    drawn = client.completions.create(model="code", prompt=PROMPT, max_tokens=12, **params)
    status, sampled = served.post(
        "/generate", {"text": PROMPT, "max_new_tokens": 12, "experts": {"code": 1.0}, **params}
    )
    assert status == 200 and drawn.choices[0].text == sampled["continuation"]
    assert drawn.choices[0].text != greedy.choices[0].text  # the seed played a part
    stream = client.completions.create(
        model="code", prompt=PROMPT, max_tokens=12, stream=True, **params
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == sampled["continuation"]
    assert [c.choices[0].finish_reason for c in chunks][-1] in ("length", "stop")
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])


def test_generated_logprobs_are_the_greedy_choices(client) -> None:
    answer = client.completions.create(
        model="auto", prompt=PROMPT, max_tokens=8, temperature=0, logprobs=3
    )
    logprobs = answer.choices[0].logprobs
    assert "".join(logprobs.tokens) == answer.choices[0].text
    assert logprobs.text_offset[0] == len(PROMPT)
    for given, top in zip(logprobs.token_logprobs, logprobs.top_logprobs, strict=True):
        assert given == max(top.values()) and given < 0 and len(top) == 3
    echoed = client.completions.create(
        model="auto", prompt=PROMPT, max_tokens=8, temperature=0, logprobs=3, echo=True
    )
    both = echoed.choices[0]
    assert both.text == PROMPT + answer.choices[0].text
    assert both.logprobs.token_logprobs[-8:] == logprobs.token_logprobs
    assert both.logprobs.text_offset[-8:] == logprobs.text_offset


def test_a_stop_string_cuts_the_text_before_it(client) -> None:
    full = (
        client.completions.create(model="code", prompt=PROMPT, max_tokens=MAX_NEW, temperature=0)
        .choices[0]
        .text
    )
    at = next(i for i in range(2, len(full) - 2) if "\ufffd" not in full[i : i + 2])
    stop = full[at : at + 2]
    expected = full[: full.find(stop)]
    cut = client.completions.create(
        model="code", prompt=PROMPT, max_tokens=MAX_NEW, temperature=0, stop=[stop, "never"]
    )
    assert cut.choices[0].text == expected and cut.choices[0].finish_reason == "stop"
    streamed = client.completions.create(
        model="code", prompt=PROMPT, max_tokens=MAX_NEW, temperature=0, stop=stop, stream=True
    )
    chunks = list(streamed)
    assert "".join(c.choices[0].text for c in chunks) == expected
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_a_huge_max_tokens_is_cut_to_the_servers_bound(client) -> None:
    answer = client.completions.create(
        model="code", prompt=PROMPT, max_tokens=10**12, temperature=0
    )
    assert 0 < answer.usage.completion_tokens <= MAX_NEW
    if answer.usage.completion_tokens == MAX_NEW:
        assert answer.choices[0].finish_reason == "length"


def test_chat_is_a_completion_of_the_documented_prompt(client) -> None:
    messages = [
        {"role": "system", "content": "You write Python."},
        {"role": "user", "content": "Add two numbers."},
    ]
    answer = client.chat.completions.create(
        model="code", messages=messages, max_tokens=12, temperature=0
    )
    prompt = "System: You write Python.\nUser: Add two numbers.\nAssistant:"
    assert chat_prompt(messages) == prompt
    same = client.completions.create(
        model="code", prompt=prompt, max_tokens=12, temperature=0, stop=list(CHAT_STOP)
    )
    message = answer.choices[0].message
    assert message.role == "assistant" and message.content == same.choices[0].text
    assert answer.object == "chat.completion" and answer.usage == same.usage
    assert answer.choices[0].finish_reason == same.choices[0].finish_reason
    stream = client.chat.completions.create(
        model="code",
        messages=messages,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == message.content
    assert chunks[-1].choices == [] and chunks[-1].usage == answer.usage
    with_logprobs = client.chat.completions.create(
        model="code",
        messages=messages,
        max_tokens=12,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    content = with_logprobs.choices[0].logprobs.content
    assert "".join(t.token for t in content) == message.content
    assert all(t.logprob == t.top_logprobs[0].logprob for t in content)


def test_the_stream_is_server_sent_events_ending_with_done(served) -> None:
    request = urllib.request.Request(
        f"{served.url}/v1/completions",
        data=b'{"model": "auto", "prompt": "def f(x):", "max_tokens": 4, "stream": true}',
        headers={**AUTH, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = response.read().decode().split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    assert all(e.startswith("data: {") for e in events[:-2]) and len(events) >= 3


def test_errors_are_openai_errors(served, client) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.completions.create(model="ghost", prompt=PROMPT)
    assert missing.value.body["code"] == "model_not_found"
    assert missing.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError) as many:
        client.completions.create(model="auto", prompt=PROMPT, n=2)
    assert many.value.body["param"] == "n" and "1" in many.value.body["message"]
    with pytest.raises(openai.BadRequestError) as role:
        client.chat.completions.create(model="auto", messages=[{"role": "tool", "content": "x"}])
    assert role.value.body["type"] == "invalid_request_error"
    stranger = openai.OpenAI(base_url=f"{served.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as denied:
        stranger.models.list()
    assert denied.value.body["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        stranger.completions.create(model="auto", prompt=PROMPT, stream=True)

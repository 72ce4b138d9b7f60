"""The chat message: the answer as Markdown that renders as it reads, ending with its sources."""

from __future__ import annotations

import pytest

from fastcrag.generation.markdown import chat_message


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ('if "__enter__()" returns, "__exit__()" is called.', "if `__enter__()` returns, `__exit__()` is called."),
        ("f(*args, **kwargs) or a|b", "f(`*args`, `**kwargs`) or `a|b`"),
        ("Use obj.__dict__. See with_stmt.", "Use `obj.__dict__`. See `with_stmt`."),
        ("Hooks are in $GIT_DIR/hooks. It costs $5.", "Hooks are in `$GIT_DIR/hooks`. It costs $5."),
        ("A *context manager* is an object.", "A \\*context manager\\* is an object."),
        ("x**2 or 2 * 3 # [a](b) <b>", "x\\*\\*2 or 2 \\* 3 \\# \\[a\\](b) \\<b\\>"),
        ("1. find a module\n- then bind it", "1\\. find a module\n\\- then bind it"),
        ("already `code` here", "already `code` here"),
        ("I don't know.", "I don't know."),
    ],
)
def test_the_message_is_markdown_safe(answer: str, message: str) -> None:
    assert chat_message(answer) == message


def test_the_message_ends_with_its_sources_once_each_files_and_urls_as_links() -> None:
    sources = ["pydoc:with", "pydoc:with", "docs/guide.md", "https://example.org/a_b", ""]
    assert chat_message("It is.", sources) == "\n".join(
        [
            "It is.",
            "",
            "Sources:",
            "",
            "1. pydoc:with",
            "2. [docs/guide.md](<docs/guide.md>)",
            "3. [https://example.org/a\\_b](<https://example.org/a_b>)",
        ]
    )


def test_a_chat_models_markdown_is_kept_and_still_gets_its_sources() -> None:
    assert (
        chat_message("**Yes**: use `with`.", ["pydoc:with"], escape=False)
        == "**Yes**: use `with`.\n\nSources:\n\n1. pydoc:with"
    )

"""Conditions a question names (years, ordinals, quarters, months) and the chunks that lack them."""

from __future__ import annotations

import pytest

from fastcrag.grading.conditions import (
    change_conditions,
    conditioned,
    lacks_condition,
    named_conditions,
    stated_forms,
    unmet_conditions,
    with_conditions_changed,
)


@pytest.mark.parametrize(
    ("question", "named"),
    [
        ("Who won the Tour de France in 2019?", [{"y2019"}]),
        ("What was Apple's revenue in Q3 2021?", [{"q3"}, {"y2021"}]),
        ("What was Apple's revenue in the third quarter?", [{"q3"}]),
        ("Who hosted the 45th edition?", [{"o45"}]),
        ("How many died in the 1918-1919 pandemic?", [{"y1918", "y1919"}]),  # a range: either end
        ("Who won the 2019-20 season?", [{"y2019", "y2020"}]),
        ("What was the jobless rate in March 2020?", [{"m3"}, {"y2020"}]),
        ("What was FY2021 revenue?", [{"y2021"}]),
        ("May I ask who may win?", []),  # the verb, capitalised or not, is no month
        # not conditions: names, decades, centuries, cardinals, words
        ("What is the R0 of COVID-19 and HAdV-55?", []),
        ("Do 1/2000 in the UK test positive?", []),
        ("What happened in the 1990s?", []),
        ("Who ruled in the 16th century?", []),
        ("Who was the first president of 3 states?", []),
    ],
)
def test_named_conditions(question: str, named: list[set[str]]) -> None:
    assert [set(c) for c in named_conditions(question)] == named


def test_a_chunk_states_a_condition_in_any_form() -> None:
    assert {"o45", "q3", "y2019", "y2020"} <= stated_forms("The forty-fifth race (2019-20) in Q3.")
    assert "o12" in stated_forms("On May 12, 1855, the fleet sailed.")  # a date states the day's ordinal
    assert "q3" in stated_forms("Third-quarter profit rose.")
    assert {"m3", "m9"} <= stated_forms("From Mar. to Sept, and on 2020-03-15.")
    question = "Who won the race in 2019?"
    assert not lacks_condition(named_conditions(question), "Bernal won the 2019 race.")
    assert lacks_condition(named_conditions(question), "Pogacar won the 2020 race.")
    assert not lacks_condition([], "anything")
    named = named_conditions("What did the 45th board say in Q3 of 2019-20 and in March?")
    assert unmet_conditions(named, "The board met.") == ["March", "Q3", "2019 or 2020", "45th"]
    assert unmet_conditions(named, "In March 2020 the forty-fifth board said in the third quarter...") == []


def test_conditioned_scores_down_only_chunks_lacking_a_named_condition() -> None:
    texts = ["Bernal won the 2019 race.", "Pogacar won the 2020 race."]
    assert conditioned("Who won in 2019?", texts, [0.9, 0.8], 0.5) == [0.9, 0.4]
    assert conditioned("Who won in 2019?", texts, [0.9, 0.8], 1.0) == [0.9, 0.8]
    assert conditioned("Who won the race?", texts, [0.9, 0.8], 0.0) == [0.9, 0.8]  # names no condition


def test_change_conditions_makes_a_near_miss_under_another_condition() -> None:
    named = named_conditions("What was revenue in the third quarter of 2021?")
    changed = change_conditions("In the third quarter of 2021 revenue was 5bn (Q3).", named)
    assert changed == "In the fourth quarter of 2022 revenue was 5bn (Q4)."
    assert change_conditions("Revenue was 5bn.", named) is None  # states none of them: nothing to change
    march = named_conditions("What was the rate in March?")
    assert change_conditions("In March (Mar) it was 4%.", march) == "In April (Apr) it was 4%."
    assert with_conditions_changed("Who won in 2019?", ["Won in 2019.", "Other."], [True, False]) == [
        "Won in 2020.",
        "Other.",
    ]
    assert with_conditions_changed("Who won?", ["Won in 2019."], [True]) is None
    assert with_conditions_changed("Who won in 2019?", ["Won in 2019."], [False]) is None

"""`amps expr check` / `amps expr eval`: readable output, caret under the column, exit 2."""

from __future__ import annotations

from click.testing import CliRunner

from amps.cli.expr_cmd import expr


def test_check_prints_the_parse() -> None:
    result = CliRunner().invoke(expr, ["check", "/a = 1 OR /b = 2 AND /c = 3"])
    assert result.exit_code == 0
    assert result.output.strip() == "((/a = 1) OR ((/b = 2) AND (/c = 3)))"


def test_check_error_has_caret_and_exit_2() -> None:
    result = CliRunner().invoke(expr, ["check", "(/a = 1"])
    assert result.exit_code == 2
    lines = result.output.splitlines()
    assert lines[:3] == [
        "(/a = 1",
        "       ^",
        "error: expected ')' but found end of expression at column 8",
    ]


def test_check_kind_queue_filter_refuses_clock() -> None:
    result = CliRunner().invoke(expr, ["check", "UNIX_TIMESTAMP() > 0", "--kind", "queue-filter"])
    assert result.exit_code == 2
    assert "not deterministic" in result.output


def test_eval_prints_value_and_match() -> None:
    args = ["eval", "TOPIC_NAME() = 'T' AND /v > 30", "--data", '{"v":[5,40]}', "--topic", "T"]
    result = CliRunner().invoke(expr, args)
    assert result.exit_code == 0
    assert result.output.splitlines() == ["value: true", "matches: true"]


def test_eval_values_and_priority() -> None:
    runner = CliRunner()
    assert runner.invoke(expr, ["eval", "/v", "--data", '{"v":[1,"a"]}']).output.startswith(
        "value: [1, 'a']"
    )
    result = runner.invoke(expr, ["eval", "/p * 2", "--kind", "priority", "--data", '{"p":2.9}'])
    assert result.output.splitlines() == ["value: 5.8", "key: 5"]
    assert runner.invoke(expr, ["eval", "BOOKMARK()", "--bookmark", "x|1|"]).output.startswith(
        "value: 'x|1|'"
    )


def test_eval_with_data_that_is_not_json_says_so() -> None:
    # Issue 11: `{qty:5}` printed `matches: false` and exit 0, hiding the typo.
    result = CliRunner().invoke(expr, ["eval", "/qty > 3", "--data", "{qty:5}"])
    assert result.exit_code == 2
    assert "--data" in result.output
    assert "not JSON" in result.output
    assert "matches" not in result.output

"""The ``tileflip`` command's own options: the command list, the version, and an unknown command; the
dtype refusals, which read the same on every command and in the Python API."""

from pathlib import Path

import pytest

import tileflip
from tileflip.cli import COMMANDS, main
from tileflip.plan.dtypes import ELEMENT_SIZE, refusal


def test_help_lists_every_command_with_a_line(capsys):
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for name in ("demo", "plan", "analyze", "check", "bench"):
        assert any(line.split()[:1] == [name] and len(line.split()) > 3 for line in text.splitlines()), name
    assert set(COMMANDS) == {"demo", "plan", "analyze", "check", "bench"}


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"tileflip {tileflip.__version__}"


@pytest.mark.parametrize("argv", [["frob"], ["--frob"], ["Plan"]])
def test_unknown_command_is_named(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"unknown command {argv[0]!r}" in err and "demo, plan, analyze, check, bench" in err


def test_no_command_prints_the_usage_and_fails(capsys):
    assert main([]) == 2
    assert "commands:" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------
# tileflip plan: the specialization codes explained, and refusals that name the option with a valid value
# --------------------------------------------------------------------------------------------------


def plan_refusal(argv, capsys, tmp_path, monkeypatch) -> str:
    """Run ``tileflip plan`` on bad options: status 2, nothing on stdout or on disk; its error line."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["plan", *argv])
    assert stop.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and list(tmp_path.iterdir()) == []
    assert "Traceback" not in captured.err
    return captured.err.strip().splitlines()[-1]


@pytest.mark.parametrize("shape", ["31x65", "4096x1", "4294967296x1"])
def test_plan_explains_the_specialization_codes(shape, capsys):
    from tileflip import plan

    assert main(["plan", "--shape", shape, "--programs", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Triton specialization class: "))
    M, N = map(int, shape.split("x"))
    printed = {"/".join(filter(None, plan.specialization_class(v))) for v in (M, N)}
    assert all(f"={code}" in lines[at] for code in printed)
    key = " ".join(lines[at + 1 : at + 3])  # the two lines under the class, once
    for code in ("i32 = fits in 32 bits", "i64 = needs 64", "D = divisible by 16", "constexpr/1 = equal to 1"):
        assert code in key
    assert "one kernel per class" in key
    assert sum("divisible by 16" in line for line in lines) == 1


def test_plan_of_a_permute_prints_no_class_and_no_key(capsys):
    """A permute's plan has no class line (the flat and tile kernels take their own arguments), so no key."""
    assert main(["plan", "--shape", "8x4096x32x128", "--perm", "0,2,1,3", "--dtype", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "specialization class" not in out and "divisible by 16" not in out


def test_plan_shape_error_shows_shapes_not_a_permutation(capsys, tmp_path, monkeypatch):
    error = plan_refusal(["--shape", "31by65"], capsys, tmp_path, monkeypatch)
    assert "argument --shape" in error and "31x65" in error and "8x4096x32x128" in error
    assert "0,2,1,3" not in error and "'31by65'" in error


def test_plan_perm_error_shows_a_permutation(capsys, tmp_path, monkeypatch):
    error = plan_refusal(["--shape", "8x4096x32x128", "--perm", "0;2;1;3"], capsys, tmp_path, monkeypatch)
    assert "argument --perm" in error and "0,2,1,3" in error and "'0;2;1;3'" in error
    error = plan_refusal(["--shape", "8x4x3", "--perm", "0,0,1"], capsys, tmp_path, monkeypatch)
    assert "argument --perm" in error and "such as 0,2,1" in error and "got 0,0,1" in error


# bad options, the option the error names, and the valid value it shows
PLAN_REFUSALS = [
    (["--shape", "31by65"], "--shape", "31x65"),
    (["--shape=-8x4"], "--shape", "31x65"),
    (["--shape", "7"], "--shape", "31x65"),
    (["--shape", "8x4096x32x128"], "--shape", "--perm 0,2,1,3"),
    (["--shape", "1x2x3x4x5x6x7x8x9", "--perm", "0,1,2,3,4,5,6,7,8"], "--shape", "8x4096x32x128"),
    (["--shape", "8x4x3", "--perm", "0,1"], "--perm", "0,2,1"),
    (["--shape", "8x4x3", "--perm=-4,0,1"], "--perm", "0,2,1"),
    (["--shape", "8x4x3", "--perm", "0,x,1"], "--perm", "0,2,1,3"),
    (["--shape", "31x65", "--block", "3by3"], "--block", "32x32"),
    (["--shape", "31x65", "--block", "33x32"], "--block", "32x32"),
    (["--shape", "31x65", "--block", "4096x4096"], "--block", "32x32"),
    (["--shape", "31x65", "--dtype", "nope"], "--dtype", "bfloat16"),
    (["--shape", "31x65", "--programs", "x"], "--programs", "12"),
    (["--shape", "31x65", "--programs", "-1"], "--programs", "12"),
]


@pytest.mark.parametrize("argv,option,example", PLAN_REFUSALS, ids=[" ".join(a) for a, _, _ in PLAN_REFUSALS])
def test_plan_refusals_name_the_option_and_a_valid_value(argv, option, example, capsys, tmp_path, monkeypatch):
    error = plan_refusal(argv, capsys, tmp_path, monkeypatch)
    assert error.startswith("tileflip plan: error: ") and option in error and example in error, error
    if option != "--perm":  # only a permutation's error shows a permutation
        assert "0,2,1,3" not in error or "--perm 0,2,1,3" in error, error


def test_plan_examples_in_errors_are_accepted(capsys):
    """The values the refusals offer are themselves valid."""
    for argv in (["--shape", "31x65", "--block", "32x32", "--programs", "12"],
                 ["--shape", "8x4096x32x128", "--perm", "0,2,1,3"],
                 ["--shape", "8x4x3", "--perm", "0,2,1"]):  # fmt: skip
        assert main(["plan", *argv]) == 0
    assert capsys.readouterr().out


# --------------------------------------------------------------------------------------------------
# Dtype refusals: one message, from the dtype table, on every command that takes a dtype and in the API
# --------------------------------------------------------------------------------------------------

CHECK_TARGET = f"{Path(__file__).parent / 'wrong' / 'misc.py'}:right"
# Every command option that takes dtypes, as argv with DTYPE where the value goes.
DTYPE_OPTIONS = {
    "plan --dtype": ["plan", "--shape", "8x8", "--dtype", "DTYPE"],
    "plan --perm --dtype": ["plan", "--shape", "8x8", "--perm", "1,0", "--dtype", "DTYPE"],
    "analyze --dtype": ["analyze", "--kernel", "tiled", "--shape", "1024x512", "--dtype", "DTYPE"],
    "check --dtypes": ["check", CHECK_TARGET, "--dtypes", "fp32,DTYPE"],
}


def dtype_refusal(argv, text, capsys) -> str:
    """The error line of a command refusing the dtype ``text`` (status 2, nothing on stdout)."""
    with pytest.raises(SystemExit) as stop:
        main([a.replace("DTYPE", text) for a in argv])
    assert stop.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    return captured.err.strip().splitlines()[-1]


def test_the_dtype_options_are_all_listed():
    """DTYPE_OPTIONS covers every command source that declares a dtype option."""
    cli = Path(tileflip.__file__).parent / "cli"
    declaring = {f.stem for f in cli.glob("*.py") if '"--dtype' in f.read_text()}
    assert declaring == {key.split()[0] for key in DTYPE_OPTIONS}


@pytest.mark.parametrize("option", DTYPE_OPTIONS)
@pytest.mark.parametrize("text", ["complex128", "cdouble", "torch.complex128"])
def test_a_16_byte_dtype_is_told_its_size_by_every_command(option, text, capsys):
    error = dtype_refusal(DTYPE_OPTIONS[option], text, capsys)
    flag = DTYPE_OPTIONS[option][-2]
    message = f"{text} is the 16-byte dtype torch.complex128; supported element sizes are 1, 2, 4 and 8 bytes"
    assert error.endswith(f"argument {flag}: {message}") and message == refusal(text)
    assert "not a dtype name" not in error


@pytest.mark.parametrize("option", DTYPE_OPTIONS)
def test_an_unknown_name_is_said_to_be_none_and_the_names_are_listed(option, capsys):
    error = dtype_refusal(DTYPE_OPTIONS[option], "float33", capsys)
    assert f"argument {DTYPE_OPTIONS[option][-2]}: 'float33' is not a dtype name (did you mean float32?); " in error
    names = error.split("Supported: ")[1].split("; short names: ")[0].split(", ")
    assert names == list(ELEMENT_SIZE)
    assert "bf16" in error.split("; short names: ")[1]


@pytest.mark.parametrize("option", DTYPE_OPTIONS)
@pytest.mark.parametrize("text,why", [
    ("uint4", "uint4 is the packed dtype torch.uint4 (several values per byte), which is not supported yet"),
    ("qint8", "qint8 is the quantized dtype torch.qint8, which is not supported; supported: bool, int8, "),
    ("bits16", "bits16 is the dtype torch.bits16, which is not supported; supported: bool, int8, "),
])
def test_other_real_dtypes_are_named_as_real(option, text, why, capsys):
    error = dtype_refusal(DTYPE_OPTIONS[option], text, capsys)
    assert why in error and "not a dtype name" not in error


def test_every_torch_dtype_name_is_known_to_the_table():
    """Each name torch gives a dtype is moved or refused for what it is, never called unknown."""
    torch = pytest.importorskip("torch")
    names = [n for n in dir(torch) if isinstance(getattr(torch, n), torch.dtype)]
    assert "complex128" in names and "cdouble" in names
    for name in names:
        message = refusal(name)
        if message is None:
            assert ELEMENT_SIZE[tileflip.plan.dtype_name(name)] == getattr(torch, name).itemsize, name
        else:
            assert "not a dtype name" not in message and str(getattr(torch, name)) in message, name


@pytest.mark.parametrize("op", ["transpose", "permute"])
@pytest.mark.parametrize("name,cli_text", [
    ("complex128", "the 16-byte dtype torch.complex128; supported element sizes are 1, 2, 4 and 8 bytes"),
    ("float4_e2m1fn_x2",
     "the packed dtype torch.float4_e2m1fn_x2 (several values per byte), which is not supported yet"),
])
def test_the_python_api_gives_the_commands_wording(op, name, cli_text, capsys):
    torch = pytest.importorskip("torch")
    x = torch.zeros(3, 4, dtype=torch.uint8).view(getattr(torch, name)) if "x2" in name else (
        torch.zeros(3, 4, dtype=getattr(torch, name)))
    call = {"transpose": lambda: tileflip.transpose(x), "permute": lambda: tileflip.permute(x, (1, 0))}[op]
    with pytest.raises(TypeError) as refused:
        call()
    assert str(refused.value) == f"x has {cli_text}" == refusal(getattr(torch, name), "x")
    error = dtype_refusal(DTYPE_OPTIONS["plan --dtype"], name, capsys)
    assert error.endswith(f"argument --dtype: {name} is {cli_text}")

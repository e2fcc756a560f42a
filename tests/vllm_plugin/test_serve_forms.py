"""The forms users type, through vLLM's own `vllm serve` argument parser and config: each maps
onto EntMTP (`custom_class` with `entmtp_vllm.EntMTP`), the platform's worker and the bank's
largest tree as the speculative budget unless given. `entmtp serve`'s raw command parses the same
way. One of these forms is served end to end in `test_serve_e2e.py` (through `entmtp serve`)."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

pytest.importorskip("vllm")

FORMS = {
    "method in --speculative-config": ["--speculative-config", '{"method": "entmtp"}'],
    "--spec-method": ["--spec-method", "entmtp"],
    "--spec-model": ["--spec-model", "entmtp"],
    "--spec-method with --spec-tokens": ["--spec-method", "entmtp", "--spec-tokens", "6"],
    "dotted class": ["--speculative-config", '{"model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 5}'],
}


def serve_args(argv: list[str]):
    """vLLM's `vllm serve` parser (as `vllm/entrypoints/cli/main.py` builds it) on `argv`."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
    args = parser.parse_args(["serve", *argv])
    args.model = args.model_tag  # what `vllm serve` does with its positional model
    return args


def engine_config(args):
    from vllm.engine.arg_utils import AsyncEngineArgs

    return AsyncEngineArgs.from_cli_args(args).create_engine_config()


@pytest.mark.parametrize("form", FORMS)
def test_each_form_parses_and_maps_onto_entmtp(form, model_path, heads_folder):
    additional = json.dumps({"entmtp": {"heads": heads_folder}})
    config = engine_config(serve_args([model_path, *FORMS[form], "--enforce-eager", "--additional-config", additional]))
    spec = config.speculative_config
    assert (spec.method, spec.model) == ("custom_class", "entmtp_vllm.EntMTP")
    assert spec.num_speculative_tokens == (6 if "--spec-tokens" in FORMS[form] else 5)  # 5: the shipped bank's largest tree
    assert config.parallel_config.worker_cls == "entmtp_vllm.vllm_plugin.cpu.worker.EntMTPCPUWorker"


def test_vllm_lists_entmtp_among_the_spec_method_choices():
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    serve = ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
    choices = next(action.choices for action in serve._actions if "--spec-method" in action.option_strings)
    assert "entmtp" in choices and "ngram" in choices
    with pytest.raises(SystemExit):  # other values are still refused by the parser
        serve_args(["m", "--spec-method", "no-such-method"])


def test_a_flag_and_the_same_key_in_the_config_are_refused(model_path):
    from entmtp_vllm.errors import EntMTPError

    args = serve_args([model_path, "--spec-method", "entmtp", "--spec-tokens", "4",
                       "--speculative-config", '{"num_speculative_tokens": 3}'])
    with pytest.raises(EntMTPError, match="mutually exclusive"):
        engine_config(args)


def test_entmtp_serves_raw_command_parses_the_same_way(model_path, heads_folder):
    from entmtp_vllm.serve_command import ServeOptions, build_serve_command

    command = build_serve_command(ServeOptions(model=model_path, heads=heads_folder), cpu=True)
    assert command.argv[1] == "serve"
    spec = json.loads(command.argv[command.argv.index("--speculative-config") + 1])
    assert spec["method"] == "entmtp"  # the form the docs show
    config = engine_config(serve_args(command.argv[2:]))
    assert config.speculative_config.model == "entmtp_vllm.EntMTP"

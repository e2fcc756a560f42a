"""`serve_command.build_serve_command`: the raw `vllm serve` line, --config, platform defaults,
the KV cache sized or checked on CPU, one-line errors."""

from __future__ import annotations

import json

import pytest

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.kv_cache_size import GIB, NodeMemory
from entmtp_vllm.serve_command import IN_PROCESS_ENV, ServeOptions, build_serve_command, option_value

ROOMY = NodeMemory(node=0, total=8 * GIB, available=6 * GIB)
BF16 = {"avx512f", "avx512_bf16"}  # a CPU with native bf16: vLLM's own dtype choice stands
AVX2 = {"avx2", "fma"}
HUB_NOTE = ("heads check: org/model is not a local folder (a hub id): the plugin checks the heads' verifier record "
            "against the weights vLLM loads")


def _build(cpu: bool = True, memory: NodeMemory = ROOMY, environ: dict | None = None, flags=BF16, cores: int = 4,
           **options):
    return build_serve_command(ServeOptions(model="org/model", **options), cpu=cpu, memory=memory,
                               environ=environ or {}, flags=flags, cores=cores)


def _entmtp_settings(command: list[str]) -> dict:
    if "--additional-config" not in command:
        return {}
    return json.loads(command[command.index("--additional-config") + 1])["entmtp"]


def test_defaults_send_no_settings_and_the_shipped_banks_budget():
    command = _build().argv
    assert command[1:3] == ["serve", "org/model"] and "--enforce-eager" in command
    spec = json.loads(command[command.index("--speculative-config") + 1])
    assert spec == {"method": "entmtp", "num_speculative_tokens": 5}  # the form users type
    assert _entmtp_settings(command) == {}


def test_config_json_goes_over_the_options():
    command = _build(acceptance="typical", config='{"acceptance": "greedy", "batch_fallback": null}').argv
    assert _entmtp_settings(command) == {"acceptance": "greedy", "batch_fallback": None}
    as_dict = _build(config={"acceptance": "greedy"}).argv
    assert _entmtp_settings(as_dict) == {"acceptance": "greedy"}


@pytest.mark.parametrize(
    "config, words",
    [
        ("{bad", ["--config", "invalid JSON"]),
        ("[1]", ["--config", "JSON object"]),
        ('{"batch_fallback": {"max_batch": 0}}', ["batch_fallback.max_batch"]),
        ('{"bogus": 1}', ["bogus"]),
    ],
)
def test_bad_config_is_one_line(config, words):
    with pytest.raises(EntMTPError) as info:
        _build(config=config)
    assert "\n" not in str(info.value)
    for word in words:
        assert word in str(info.value)


def test_cpu_defaults_only_on_cpu():
    assert option_value(_build().argv, "--distributed-executor-backend") == "uni"  # the default on CPU
    gpu = _build(cpu=False)
    assert "--enforce-eager" not in gpu.argv and "--kv-cache-memory-bytes" not in gpu.argv
    assert gpu.env == {} and gpu.notes == [HUB_NOTE]  # only the heads check left to the plugin
    assert "--enforce-eager" not in _build(eager=False).argv


def test_float32_on_cpus_without_native_bf16(tmp_path):
    avx2 = _build(flags=AVX2)
    assert option_value(avx2.argv, "--dtype") == "float32" and "no native bf16" in avx2.notes[1]
    native = _build(flags=BF16)
    assert option_value(native.argv, "--dtype") is None  # vLLM's choice (bf16 here)
    assert any("--dtype float32 for greedy outputs token-identical" in note for note in native.notes)
    assert not any("dtype" in note for note in _build(flags=BF16, dtype="float32").notes)
    assert option_value(_build(flags={"avx2", "amx_bf16"}).argv, "--dtype") is None
    assert option_value(_build(flags=AVX2, dtype="bfloat16").argv, "--dtype") == "bfloat16"  # the user's
    mine = _build(flags=AVX2, vllm_args=["--dtype", "bfloat16"])
    assert mine.argv.count("--dtype") == 1 and option_value(mine.argv, "--dtype") == "bfloat16"
    assert "--dtype" not in _build(cpu=False, flags=AVX2).argv  # GPUs: vLLM decides
    (tmp_path / "config.json").write_text(json.dumps({
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64,
        "max_position_embeddings": 1024, "torch_dtype": "bfloat16",
    }))
    sized = build_serve_command(ServeOptions(model=str(tmp_path)), cpu=True, memory=ROOMY, environ={}, flags=AVX2)
    assert int(option_value(sized.argv, "--kv-cache-memory-bytes")) == 16 * 1024 * (2 * 2 * 2 * 16 * 4)  # float32


@pytest.mark.parametrize(
    "in_process, vllm_args, expected",
    [
        (True, [], True),
        (False, [], False),
        (True, ["--", "--max-model-len", "2048"], True),
        (True, ["--", "-tp", "2"], False),  # several devices: vLLM's own executor
        (True, ["--tensor-parallel-size=2"], False),
        (True, ["--tensor_parallel_size=2"], False),  # vLLM takes underscores too
        (True, ["--", "--distributed-executor-backend", "mp"], False),  # the user's choice, once
    ],
)
def test_in_process_sets_both_the_executor_and_the_variable(in_process, vllm_args, expected):
    built = _build(in_process=in_process, vllm_args=vllm_args)
    assert any("process layout" in note for note in built.notes) is expected  # said, with how to undo it
    uni = option_value(built.argv, "--distributed-executor-backend") == "uni"
    assert uni is expected
    # `uni` without the variable is turned back into `mp` by vLLM's CPU platform: never one alone
    assert (IN_PROCESS_ENV.items() <= built.env.items()) is expected
    assert ("OMP_NUM_THREADS" in built.env) is expected  # vLLM's own layout binds its worker's threads itself
    assert built.argv.count("--distributed-executor-backend") <= 1
    if expected:
        assert built.shell().startswith("VLLM_ENABLE_V1_MULTIPROCESSING=0 ")


def test_kv_cache_sized_for_the_machine(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576,
        "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
    }))
    options = dict(model=str(tmp_path))
    built = build_serve_command(ServeOptions(**options), cpu=True, memory=ROOMY, environ={}, flags=BF16)
    size = int(option_value(built.argv, "--kv-cache-memory-bytes"))
    per_token = 2 * 30 * 3 * 64 * 2
    assert size == 16 * 8192 * per_token  # 16 full sequences fit in half of 6 GiB
    assert "16 sequences of 8192 tokens" in built.notes[-1]
    small = NodeMemory(node=0, total=8 * GIB, available=2 * GIB)
    built = build_serve_command(ServeOptions(**options), cpu=True, memory=small, environ={}, flags=BF16)
    assert int(option_value(built.argv, "--kv-cache-memory-bytes")) == GIB  # capped at half of what is available
    shorter = build_serve_command(ServeOptions(**options, vllm_args=["--max-model-len", "1k"]), cpu=True,
                                  memory=ROOMY, environ={}, flags=BF16)
    assert int(option_value(shorter.argv, "--kv-cache-memory-bytes")) == 16 * 1000 * per_token
    underscored = build_serve_command(ServeOptions(**options, vllm_args=["--max_model_len=1k"]), cpu=True,
                                      memory=ROOMY, environ={}, flags=BF16)
    assert int(option_value(underscored.argv, "--kv-cache-memory-bytes")) == 16 * 1000 * per_token
    (tmp_path / "config.json").write_text((tmp_path / "config.json").read_text().replace("bfloat16", "float32"))
    auto = build_serve_command(ServeOptions(**options), cpu=True, memory=ROOMY, environ={}, flags=BF16)
    assert int(option_value(auto.argv, "--kv-cache-memory-bytes")) == 16 * 8192 * per_token  # vLLM downcasts
    fp32 = build_serve_command(ServeOptions(**options, dtype="float32", vllm_args=["--max-model-len=4096"]),
                               cpu=True, memory=ROOMY, environ={}, flags=BF16)
    assert int(option_value(fp32.argv, "--kv-cache-memory-bytes")) == 2 * 16 * 4096 * per_token


@pytest.mark.parametrize(
    "vllm_args, environ",
    [
        (["--kv-cache-memory-bytes", "1G"], {}),
        (["--kv-cache-memory-bytes=1073741824"], {}),
        (["--gpu-memory-utilization", "0.5"], {}),
        ([], {"VLLM_CPU_KVCACHE_SPACE": "1"}),
    ],
)
def test_a_size_the_user_gives_is_kept(vllm_args, environ):
    built = _build(vllm_args=vllm_args, environ=environ)
    assert built.argv.count("--kv-cache-memory-bytes") + sum(a.startswith("--kv-cache-memory-bytes=") for a in built.argv) \
        == (1 if any("kv-cache" in a for a in vllm_args) else 0)
    assert not any("KV cache" in note or "kv-cache" in note for note in built.notes)


@pytest.mark.parametrize(
    "vllm_args, environ, words",
    [
        (["--kv-cache-memory-bytes", "30G"], {}, ["--kv-cache-memory-bytes", "6.00 of 8.00 GiB", "3072M or less"]),
        ([], {"VLLM_CPU_KVCACHE_SPACE": "20"}, ["VLLM_CPU_KVCACHE_SPACE=20", "3072M"]),
        (["--gpu-memory-utilization", "0.92"], {}, ["--gpu-memory-utilization 0.92", "7.36 GiB", "0.67 or less"]),
        (["--gpu-memory-utilization=1.5"], {}, ["must be in (0, 1]"]),
        (["--kv-cache-memory-bytes", "lots"], {}, ["not a size"]),
    ],
)
def test_a_size_the_machine_cannot_hold_is_one_line(vllm_args, environ, words):
    with pytest.raises(EntMTPError) as info:
        _build(vllm_args=vllm_args, environ=environ)
    text = str(info.value)
    assert "\n" not in text
    for word in words:
        assert word in text


def test_no_room_for_one_sequence_names_a_length_that_fits(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096,
        "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
    }))
    with pytest.raises(EntMTPError, match=r"--max-model-len \d+") as info:
        build_serve_command(ServeOptions(model=str(tmp_path)), cpu=True, memory=ROOMY, environ={}, flags=BF16)
    fits = int(str(info.value).split("--max-model-len ")[1].split()[0])
    built = build_serve_command(ServeOptions(model=str(tmp_path), vllm_args=["--max-model-len", str(fits)]),
                                cpu=True, memory=ROOMY, environ={}, flags=BF16)
    assert "--kv-cache-memory-bytes" in built.argv


def _packed_kernel_builds() -> bool:
    from entmtp_vllm.cpu_gemm.build import CpuGemmUnavailable, load_library

    try:
        load_library()
    except CpuGemmUnavailable:
        return False
    return True


def test_cpu_matrix_multiply_follows_the_dtype_and_the_users_choice():
    gemm = "ENTMTP_CPU_GEMM"
    assert gemm not in _build(flags=BF16).env  # vLLM's dtype (bf16 here): vLLM's own matrix multiply
    assert _build(flags=AVX2, cpu_gemm="vllm").env[gemm] == "vllm"
    assert gemm not in _build(cpu=False, flags=AVX2).env  # GPUs: never
    # a variable the caller set wins in automatic mode, and is said
    env_set = _build(flags=AVX2, environ={gemm: "vllm"})
    assert gemm not in env_set.env and any("from the environment" in note for note in env_set.notes)
    with pytest.raises(EntMTPError, match="float32") as info:
        _build(flags=BF16, cpu_gemm="packed")
    assert "\n" not in str(info.value)
    if _packed_kernel_builds():
        auto = _build(flags=AVX2)
        assert auto.env[gemm] == "packed" and "ENTMTP_CPU_GEMM=packed " in auto.shell()
        assert any("packed kernel" in note for note in auto.notes)
        assert _build(flags=BF16, cpu_gemm="packed", dtype="float32").env[gemm] == "packed"


def test_cpu_matrix_multiply_without_a_compiler(monkeypatch, tmp_path):
    from entmtp_vllm.cpu_gemm import build

    monkeypatch.setattr(build, "_load", lambda: (None, "no C++ compiler found (set CXX, or install g++)"))
    auto = _build(flags=AVX2)
    assert "ENTMTP_CPU_GEMM" not in auto.env
    assert any("vLLM's own (EntMTP's packed kernel is unavailable: no C++ compiler" in note for note in auto.notes)
    with pytest.raises(EntMTPError, match="--cpu-gemm packed: no C\\+\\+ compiler"):
        _build(flags=AVX2, cpu_gemm="packed")


def test_an_in_process_engine_gets_every_core_unless_told_otherwise():
    built = _build(cores=3)
    assert built.env["OMP_NUM_THREADS"] == "3" and "OMP_NUM_THREADS=3 " in built.shell()
    assert any(note.startswith("torch threads: OMP_NUM_THREADS=3: every core") for note in built.notes)
    # the caller's variable wins over the default, and is said to
    kept = _build(cores=3, environ={"OMP_NUM_THREADS": "1"})
    assert "OMP_NUM_THREADS" not in kept.env
    assert "torch threads: OMP_NUM_THREADS=1 from the environment" in kept.notes
    # an explicit --threads wins over both
    assert _build(cores=3, threads=2, environ={"OMP_NUM_THREADS": "1"}).env["OMP_NUM_THREADS"] == "2"
    assert "OMP_NUM_THREADS" not in _build(cpu=False).env  # on a GPU vLLM's defaults stand


@pytest.mark.parametrize(
    "options, words",
    [
        ({"threads": 5}, ["--threads 5", "--server-threads", "4 cores", "use 4 or fewer"]),
        ({"threads": 2, "in_process": False}, ["--threads 2", "vLLM's own process layout"]),
        ({"threads": 2, "vllm_args": ["--distributed-executor-backend", "mp"]}, ["--threads 2"]),
    ],
)
def test_threads_the_engine_cannot_use_are_one_line(options, words):
    with pytest.raises(EntMTPError) as err:
        _build(cores=4, **options)
    assert "\n" not in str(err.value) and all(word in str(err.value) for word in words)


def test_threads_below_one_are_refused():
    with pytest.raises(ValueError):
        ServeOptions(threads=0)


def test_a_bad_rows_attention_setting_is_one_line_before_any_server_starts():
    with pytest.raises(EntMTPError, match="ENTMTP_CPU_ROWS_ATTENTION='yes' is not one of on, all, off") as info:
        _build(environ={"ENTMTP_CPU_ROWS_ATTENTION": "yes"})
    assert "\n" not in str(info.value)
    assert _build(environ={"ENTMTP_CPU_ROWS_ATTENTION": "on"}).argv  # the good values pass
    assert _build(cpu=False, environ={"ENTMTP_CPU_ROWS_ATTENTION": "yes"}).argv  # a CPU setting: not read on a GPU


def _model_folder(folder, seed: int, hidden: int = 16, vocab: int = 40):
    """A model folder with what the heads check reads: config.json and the embedding (tied)."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir()
    embed = torch.randn(vocab, hidden, generator=torch.Generator().manual_seed(seed)) * 0.05
    save_file({"model.embed_tokens.weight": embed}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                                    "vocab_size": vocab, "hidden_size": hidden, "tie_word_embeddings": True}))
    return folder


def test_heads_are_checked_against_a_local_model_before_anything_starts(tmp_path):
    from entmtp_vllm.heads import HydraHeads
    from entmtp_vllm.heads.checkpoint import save_heads
    from entmtp_vllm.heads.verifier import record_of_folder

    trained, other = _model_folder(tmp_path / "trained", 0), _model_folder(tmp_path / "other", 1)
    heads = save_heads(HydraHeads(16, 40, num_heads=2), tmp_path / "heads", verifier=record_of_folder(trained))

    def build(model, heads_folder=heads):
        return build_serve_command(ServeOptions(model=str(model), heads=str(heads_folder)), cpu=False)

    assert build(trained).notes == []
    with pytest.raises(EntMTPError) as info:
        build(other)
    assert "\n" not in str(info.value) and "trained (LlamaForCausalLM)" in str(info.value) and "other (LlamaForCausalLM)" in str(info.value)
    unrecorded = save_heads(HydraHeads(16, 40, num_heads=2), tmp_path / "unrecorded", {"base_model": "trained"})
    (note,) = build(other, unrecorded).notes
    assert note.startswith("heads check: heads ") and "carry no 'verifier' record" in note
    with pytest.raises(EntMTPError, match="hidden size 16 but wide has 32"):
        build(_model_folder(tmp_path / "wide", 0, hidden=32), unrecorded)
    (tmp_path / "other" / "model.safetensors").rename(tmp_path / "other" / "weights.bin")
    (note,) = build(other).notes
    assert note.startswith("heads check: ") and "keeps no safetensors weights" in note

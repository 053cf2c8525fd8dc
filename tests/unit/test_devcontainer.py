"""A repository's devcontainer.json read in the Dev Containers specification's meaning: its three forms of command,
comments and trailing commas, every refusal naming its key, nothing followed out of the repository."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import msgspec
import pytest

from sandbox.devcontainer import (HONOURED, IGNORED, MAX_CONFIG, MAX_DOCKERFILE, MAX_LOCKFILE, REFUSED, Build, Command,
                                  DevContainer, DevContainerError, Parallel, find, image_metadata, load, lockfiles,
                                  parse)
from sandbox.errors import SandboxError

WHERE = ".devcontainer/devcontainer.json"


def write(root: Path, rel: str, text: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def refused(text: str, **kw: str) -> DevContainerError:
    with pytest.raises(DevContainerError) as e:
        parse(text, **kw)
    return e.value


def doc(**keys: object) -> str:
    return json.dumps({"image": "debian:12", **keys})


# ------------------------------------------------------------------------------------------------ which file


def test_the_specifications_precedence_picks_the_folder_file_over_the_root_file_over_a_sub_folder(
        tmp_path: Path) -> None:
    write(tmp_path, ".devcontainer/python/devcontainer.json", doc())
    assert find(tmp_path) == ".devcontainer/python/devcontainer.json"
    write(tmp_path, ".devcontainer.json", doc())
    assert find(tmp_path) == ".devcontainer.json"
    write(tmp_path, WHERE, doc())
    assert find(tmp_path) == WHERE


def test_a_repository_without_one_has_none(tmp_path: Path) -> None:
    assert find(tmp_path) is None and load(tmp_path) is None
    (tmp_path / ".devcontainer").mkdir()
    (tmp_path / ".devcontainer" / "notes").mkdir()
    assert load(tmp_path) is None


def test_a_plain_file_named_devcontainer_is_no_configuration(tmp_path: Path) -> None:
    write(tmp_path, ".devcontainer", "notes")
    assert load(tmp_path) is None


def test_two_sub_folder_configurations_are_refused_naming_both(tmp_path: Path) -> None:
    write(tmp_path, ".devcontainer/node/devcontainer.json", doc())
    write(tmp_path, ".devcontainer/python/devcontainer.json", doc())
    with pytest.raises(DevContainerError) as e:
        load(tmp_path)
    assert ".devcontainer/node/devcontainer.json" in str(e.value)
    assert ".devcontainer/python/devcontainer.json" in str(e.value) and "cannot choose" in e.value.sentence


def test_a_sub_folder_configurations_paths_are_relative_to_its_own_folder(tmp_path: Path) -> None:
    write(tmp_path, ".devcontainer/node/devcontainer.json", json.dumps({"build": {"dockerfile": "Dockerfile"}}))
    write(tmp_path, ".devcontainer/node/Dockerfile", "FROM node:20\n")
    config = load(tmp_path)
    assert config is not None and config.path == ".devcontainer/node/devcontainer.json"
    assert config.build == Build(dockerfile=".devcontainer/node/Dockerfile", context=".devcontainer/node")


def test_text_given_by_the_caller_is_read_as_the_file_found_and_its_build_checked_on_disk(tmp_path: Path) -> None:
    write(tmp_path, ".devcontainer.json", doc())
    given = json.dumps({"build": {"dockerfile": "Dockerfile"}})
    with pytest.raises(DevContainerError, match="Dockerfile Dockerfile is not in the repository"):
        load(tmp_path, text=given)
    write(tmp_path, "Dockerfile", "FROM debian:12\n")
    config = load(tmp_path, text=given)
    assert config is not None and config.path == ".devcontainer.json" and config.build == Build("Dockerfile")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert load(empty, text=doc()) == DevContainer(path=WHERE, image="debian:12")


# ------------------------------------------------------------------------------------------------ JSON with comments


def test_comments_and_trailing_commas_are_read_and_strings_that_look_like_them_survive() -> None:
    text = """// the team's environment
    {
      /* the image
         we use */
      "image": "node:20", // pinned
      "containerEnv": {
        "URL": "http://registry.local//simple/",   // a // inside a string
        "GLOB": "src/**/*.ts /* not a comment */",
        "QUOTE": "say \\"hi\\" // still a string",
        "SLASH": "ends in a backslash \\\\",
        "ESCAPED": "one \\" // two",
      },
      "postCreateCommand": ["npm", "ci", ],
    }
    """
    config = parse(text)
    assert config.container_env == {"URL": "http://registry.local//simple/", "GLOB": "src/**/*.ts /* not a comment */",
                                    "QUOTE": 'say "hi" // still a string', "SLASH": "ends in a backslash \\",
                                    "ESCAPED": 'one " // two'}
    assert config.post_create == Command(argv=("npm", "ci"))


def test_a_typical_configuration_with_an_editors_leftovers_loads(tmp_path: Path) -> None:
    write(tmp_path, WHERE, """{
        "name": "shop (Node 20)",
        "build": { "dockerfile": "Dockerfile", "args": { "VARIANT": "20-bookworm" } },
        // "features": { "ghcr.io/devcontainers/features/github-cli:1": {} },
        "features": {},
        "forwardPorts": [],
        "containerEnv": { "NPM_CONFIG_UPDATE_NOTIFIER": "false" },
        "postCreateCommand": "npm ci",
        "customizations": { "vscode": { "extensions": ["dbaeumer.vscode-eslint"] } },
        "remoteUser": "node",
    }""")
    write(tmp_path, ".devcontainer/Dockerfile", "ARG VARIANT\nFROM node:${VARIANT}\n")
    assert load(tmp_path) == DevContainer(path=WHERE, build=Build(".devcontainer/Dockerfile", ".devcontainer",
                                                                  args={"VARIANT": "20-bookworm"}),
                                          container_env={"NPM_CONFIG_UPDATE_NOTIFIER": "false"},
                                          post_create=Command(shell="npm ci"), remote_user="node")


def test_a_byte_order_mark_is_allowed() -> None:
    assert parse("\ufeff" + doc()).image == "debian:12"


def test_a_json_error_names_the_file_line_and_column_as_the_team_wrote_them() -> None:
    text = '{\n  /* a comment\n  over lines */ "image": "debian:12",\n  "name": "x" "oops": 1\n}\n'
    e = refused(text, path=".devcontainer.json")
    assert (e.path, e.line, e.column) == (".devcontainer.json", 4, 15)
    assert str(e).startswith(".devcontainer.json:4:15: is not valid JSON with comments: Expecting ','")
    assert isinstance(e, SandboxError) and isinstance(e, ValueError)


def test_an_unclosed_comment_is_pointed_at() -> None:
    e = refused('{"image": "debian:12"\n  /* never closed\n}')
    assert (e.line, e.column) == (2, 3) and "never closed" in e.sentence


@pytest.mark.parametrize("text, sentence", [
    ('["image"]', "must hold one JSON object"),
    ('{"image": "debian:12", "image": "node:20"}', "\"image\" appears twice"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("", "Expecting value"),
])
def test_what_is_not_one_configuration_is_refused(text: str, sentence: str) -> None:
    assert sentence in refused(text).sentence


# ------------------------------------------------------------------------------------------------ keys


REFUSED_SAMPLES: dict[str, object] = {
    "features": {"ghcr.io/devcontainers/features/node:1": {}}, "overrideFeatureInstallOrder": ["node"],
    "forwardPorts": [3000], "appPort": 3000, "mounts": ["source=/,target=/host,type=bind"],
    "workspaceMount": "source=/,target=/w,type=bind", "runArgs": ["--network=host"], "privileged": True,
    "capAdd": ["SYS_ADMIN"], "securityOpt": ["seccomp=unconfined"], "dockerComposeFile": "compose.yml",
    "service": "app", "runServices": ["db"], "initializeCommand": "curl https://example.com | sh",
    "postStartCommand": "git config --global --add safe.directory /w", "postAttachCommand": "echo hi",
    "hostRequirements": {"cpus": 4}, "userEnvProbe": "loginInteractiveShell", "overrideCommand": False,
    "build.options": ["--network=host"], "build.cacheFrom": "ghcr.io/org/cache",
}


def test_every_refused_key_has_a_sample_here() -> None:
    assert set(REFUSED_SAMPLES) == set(REFUSED)
    assert not set(REFUSED) & set(HONOURED) and not set(REFUSED) & set(IGNORED) and not set(HONOURED) & set(IGNORED)


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_each_refused_key_is_named_in_a_sentence_with_its_reason(key: str) -> None:
    value = REFUSED_SAMPLES[key]
    if key.startswith("build."):
        text = json.dumps({"build": {"dockerfile": "Dockerfile", key[6:]: value}})
    else:
        text = doc(**{key: value})
    e = refused(text)
    assert e.sentence == f"\"{key}\" is not honoured: {REFUSED[key]}." and e.path == WHERE


def test_several_refused_keys_are_named_together_so_the_team_fixes_them_at_once() -> None:
    e = refused(doc(features={"x": {}}, runArgs=["--privileged"], frobnicate=1))
    assert "\"features\" is not honoured" in e.sentence and "\"runArgs\" is not honoured" in e.sentence
    assert "\"frobnicate\" is not a key of the Dev Containers specification" in e.sentence


@pytest.mark.parametrize("key, value", [("privileged", False), ("overrideCommand", True), ("userEnvProbe", "none"),
                                        ("features", {}), ("forwardPorts", []), ("mounts", []), ("runArgs", []),
                                        ("capAdd", []), ("securityOpt", [])])
def test_a_refused_key_given_the_value_flower_already_has_is_accepted(key: str, value: object) -> None:
    assert parse(doc(**{key: value})).image == "debian:12"


def test_metadata_keys_are_ignored_even_with_host_variables_in_them() -> None:
    text = doc(**{"$schema": "https://x", "name": "${localEnv:USER}'s box", "shutdownAction": "none",
                  "customizations": {"vscode": {"settings": {"home": "${localEnv:HOME}"}}},
                  "waitFor": "onCreateCommand",
                  "secrets": {"NPM_TOKEN": {}}, "portsAttributes": {"3000": {}}, "otherPortsAttributes": {},
                  "updateRemoteUserUID": True, "init": True, "extensions": ["ms-python.python"], "settings": {}})
    assert parse(text) == DevContainer(path=WHERE, image="debian:12")


def test_an_unknown_key_of_build_is_named_with_its_prefix() -> None:
    e = refused(json.dumps({"build": {"dockerfile": "Dockerfile", "platform": "arm64"}}))
    assert "\"build.platform\" is not a key of the Dev Containers specification" in e.sentence


@pytest.mark.parametrize("key", ["build.dockerfile", "build.options", "build.image"])
def test_a_dotted_key_at_the_top_is_not_mistaken_for_a_key_of_build(key: str) -> None:
    e = refused(doc(**{key: "x"}))
    assert e.sentence.startswith(f"\"{key}\" is not a key of the Dev Containers specification")


# ------------------------------------------------------------------------------------------------ image or build


def test_exactly_one_of_image_and_build_is_required() -> None:
    assert "it gives neither" in refused("{}").sentence
    both = json.dumps({"image": "debian:12", "build": {"dockerfile": "Dockerfile"}})
    assert "it gives both" in refused(both).sentence
    assert "must name a \"dockerfile\"" in refused(json.dumps({"build": {"args": {"A": "1"}}})).sentence


def test_a_build_keeps_its_args_and_target_and_its_paths_are_repository_relative() -> None:
    config = parse(json.dumps({"build": {"dockerfile": "Dockerfile", "context": "..", "args": {"NODE": "20"},
                                         "target": "dev"}}))
    assert config.build == Build(dockerfile=".devcontainer/Dockerfile", context=".", args={"NODE": "20"},
                                 target="dev")
    assert config.image is None


def test_the_legacy_dockerFile_and_context_keys_mean_build() -> None:
    config = parse(json.dumps({"dockerFile": "../docker/dev.Dockerfile", "context": "..",
                               "build": {"args": {"V": "1"}}}))
    assert config.build == Build(dockerfile="docker/dev.Dockerfile", context=".", args={"V": "1"})
    assert parse(json.dumps({"dockerFile": "Dockerfile"})).build == Build(".devcontainer/Dockerfile",
                                                                           context=".devcontainer")


@pytest.mark.parametrize("keys, sentence", [
    ({"dockerFile": "A", "build": {"dockerfile": "B"}}, "both \"dockerFile\" and \"build.dockerfile\""),
    ({"build": {"dockerfile": "A"}, "context": ".."}, "\"context\" goes with the legacy \"dockerFile\""),
    ({"dockerFile": "A", "build": {"context": ".."}}, "both \"context\" and \"build.context\""),
])
def test_mixed_legacy_and_build_keys_are_refused(keys: dict[str, object], sentence: str) -> None:
    assert sentence in refused(json.dumps(keys)).sentence


@pytest.mark.parametrize("key, value", [("dockerfile", "../../Dockerfile"), ("dockerfile", "/etc/passwd"),
                                        ("context", "../.."), ("context", "../../../etc"),
                                        ("dockerfile", "a/../../..")])
def test_a_path_that_leaves_the_repository_is_refused(key: str, value: str) -> None:
    build = {"dockerfile": "Dockerfile", key: value}
    e = refused(json.dumps({"build": build}))
    assert f"\"build.{key}\" is {value!r}, which leaves the repository" in e.sentence


def test_a_root_level_file_cannot_reach_above_the_root_either() -> None:
    e = refused(json.dumps({"dockerFile": "../Dockerfile"}), path=".devcontainer.json")
    assert "\"dockerFile\" is '../Dockerfile', which leaves the repository" in e.sentence


@pytest.mark.parametrize("keys, named", [
    ({"image": "-v/:/host"}, "\"image\" must be an image reference"),
    ({"image": "debian 12"}, "\"image\" must be an image reference"),
    ({"image": 12}, "\"image\" must be an image reference"),
    ({"image": "debian:12", "remoteUser": "root; rm -rf /"}, "\"remoteUser\" must be a user name"),
    ({"image": "debian:12", "containerUser": "--privileged"}, "\"containerUser\" must be a user name"),
    ({"image": "debian:12", "containerEnv": {"A=B": "1"}}, "\"containerEnv\" names 'A=B'"),
    ({"image": "debian:12", "containerEnv": {"A": None}}, "\"containerEnv.A\" must be a string without NUL"),
    ({"image": "debian:12", "containerEnv": ["A=1"]}, "\"containerEnv\" must be an object"),
    ({"image": "debian:12", "remoteEnv": {"A": 1}}, "\"remoteEnv.A\" must be a string or null"),
    ({"image": "debian:12", "workspaceFolder": "src"}, "\"workspaceFolder\" must be an absolute path"),
    ({"build": {"dockerfile": "D", "args": {"A": 1}}}, "\"build.args\" must be an object of names and strings"),
    ({"build": {"dockerfile": "D", "args": {"1A": "x"}}}, "\"build.args\" names '1A'"),
    ({"build": {"dockerfile": "D", "target": "--output=/"}}, "\"target\" must be a build stage's name"),
    ({"build": {"dockerfile": 7}}, "\"build.dockerfile\" must be a path"),
    ({"build": "Dockerfile"}, "\"build\" must be an object"),
])
def test_a_value_of_the_wrong_kind_is_refused_naming_its_key(keys: dict[str, object], named: str) -> None:
    assert named in refused(json.dumps(keys)).sentence


# ------------------------------------------------------------------------------------------------ commands


def test_the_three_forms_of_a_lifecycle_command_are_kept() -> None:
    config = parse(doc(onCreateCommand="npm ci && npm run build", updateContentCommand=["pip", "install", "-e", "."],
                       postCreateCommand={"deps": "npm ci", "tools": ["go", "install", "./..."], "nothing": ""}))
    assert config.on_create == Command(shell="npm ci && npm run build")
    assert config.on_create.args() == ("/bin/sh", "-c", "npm ci && npm run build")
    assert config.update_content == Command(argv=("pip", "install", "-e", "."))
    assert config.update_content.args() == ("pip", "install", "-e", ".")
    assert config.post_create == Parallel({"deps": Command(shell="npm ci"), "tools": Command(argv=("go", "install",
                                                                                                    "./..."))})
    assert [key for key, _ in config.setup()] == ["onCreateCommand", "updateContentCommand", "postCreateCommand"]


def test_an_empty_command_is_nothing_to_run() -> None:
    config = parse(doc(onCreateCommand="  ", updateContentCommand=[], postCreateCommand={"a": "", "b": []}))
    assert (config.on_create, config.update_content, config.post_create) == (None, None, None)
    assert config.setup() == []


@pytest.mark.parametrize("value, key", [(42, "onCreateCommand"), (["npm", 1], "onCreateCommand"),
                                        ({"a": {"b": "c"}}, "onCreateCommand.a"), ({"a": 1}, "onCreateCommand.a")])
def test_a_command_of_another_shape_is_refused_naming_its_key(value: object, key: str) -> None:
    e = refused(doc(onCreateCommand=value))
    assert e.sentence.startswith(f"\"{key}\" must be a string (run by a shell), an array of strings")


def test_the_user_is_remote_user_then_container_user_then_the_images() -> None:
    assert parse(doc(containerUser="1000:1000", remoteUser="node")).user() == "node"
    assert parse(doc(containerUser="1000:1000")).user() == "1000:1000"
    assert parse(doc()).user() is None


# ------------------------------------------------------------------------------------------------ variables


@pytest.mark.parametrize("where, keys", [
    ("containerEnv.TOKEN", {"containerEnv": {"TOKEN": "${localEnv:NPM_TOKEN}"}}),
    ("remoteEnv.HOME_DIR", {"remoteEnv": {"HOME_DIR": "${localEnv:HOME:/root}"}}),
    ("build.args.V", {"build": {"dockerfile": "D", "args": {"V": "${env:VERSION}"}}}),
    ("postCreateCommand.a", {"postCreateCommand": {"a": ["cp", "${localHomeFolder}/.npmrc", "."]}}),
    ("onCreateCommand", {"onCreateCommand": "ls ${localWorkspaceFolder}"}),
])
def test_the_hosts_variables_are_refused_naming_where_they_are(where: str, keys: dict[str, object]) -> None:
    keys = keys if "build" in keys else {"image": "debian:12", **keys}
    e = refused(json.dumps(keys))
    assert e.sentence.startswith(f"{where} uses ${{") and "the host is never a run's" in e.sentence


def test_container_env_is_for_remote_env_only_and_must_name_a_variable() -> None:
    e = refused(doc(postCreateCommand="echo ${containerEnv:PATH}"))
    assert "postCreateCommand uses ${containerEnv:PATH}, but ${containerEnv:…} is for remoteEnv only" in e.sentence
    assert "names no variable" in refused(doc(remoteEnv={"P": "${containerEnv}"})).sentence


def test_remote_env_resolves_container_env_with_its_default_and_unset_as_empty() -> None:
    config = parse(doc(remoteEnv={"PATH": "${containerEnv:PATH}:/opt/bin", "A": "${containerEnv:NOPE:fallback}",
                                  "B": "[${containerEnv:NOPE}]", "C": None, "D": "${HOME} kept"}))
    assert config.remote_env["PATH"] == "${containerEnv:PATH}:/opt/bin", "kept until the container's env is known"
    assert config.remote_env_in({"PATH": "/usr/bin"}) == {"PATH": "/usr/bin:/opt/bin", "A": "fallback", "B": "[]",
                                                          "C": None, "D": "${HOME} kept"}


def test_the_workspace_variables_wait_for_the_folder_and_the_checkouts_name_is_put_in_at_load() -> None:
    config = parse(doc(workspaceFolder="/workspaces/${localWorkspaceFolderBasename}",
                       postCreateCommand="git config --global --add safe.directory ${containerWorkspaceFolder}",
                       containerEnv={"PROJECT": "${containerWorkspaceFolderBasename}", "SHELL_VAR": "${HOME}"}),
                   checkout="shop")
    assert config.workspace_folder == "/workspaces/shop"
    placed = config.in_workspace("/workspaces/shop/")
    assert placed.post_create == Command(shell="git config --global --add safe.directory /workspaces/shop/")
    assert placed.container_env == {"PROJECT": "shop", "SHELL_VAR": "${HOME}"}
    assert config.post_create == Command(shell="git config --global --add safe.directory ${containerWorkspaceFolder}")
    with pytest.raises(DevContainerError, match="must be an absolute path"):
        config.in_workspace("relative")


def test_workspace_folder_cannot_name_itself_and_devcontainer_id_is_not_given() -> None:
    assert "which is workspaceFolder itself" in refused(doc(workspaceFolder="${containerWorkspaceFolder}")).sentence
    assert "${devcontainerId}, which flower does not give" in refused(doc(containerEnv={"I": "${devcontainerId}"}
                                                                           )).sentence


def test_a_configuration_is_a_stable_cache_key_input() -> None:
    text = doc(postCreateCommand={"b": "x", "a": ["y"]}, containerEnv={"Z": "1"})
    assert msgspec.json.encode(parse(text)) == msgspec.json.encode(parse(text))
    assert msgspec.json.encode(parse(text)) != msgspec.json.encode(parse(doc(postCreateCommand={"b": "x"})))


# ------------------------------------------------------------------------------------------------ the disk


def test_a_symlinked_devcontainer_json_is_refused_even_when_its_target_is_in_the_repository(tmp_path: Path) -> None:
    write(tmp_path, "real.json", doc())
    (tmp_path / ".devcontainer").mkdir()
    (tmp_path / ".devcontainer" / "devcontainer.json").symlink_to(tmp_path / "real.json")
    with pytest.raises(DevContainerError, match="is, or lies under, a symlink: not followed") as e:
        load(tmp_path)
    assert e.value.path == WHERE


def test_a_symlinked_devcontainer_folder_pointing_out_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside, "devcontainer.json", doc())
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".devcontainer").symlink_to(outside)
    with pytest.raises(DevContainerError, match="symlink"):
        load(repo)


def test_a_symlinked_sub_folder_is_not_searched(tmp_path: Path) -> None:
    write(tmp_path, "elsewhere/devcontainer.json", doc())
    (tmp_path / ".devcontainer").mkdir()
    (tmp_path / ".devcontainer" / "linked").symlink_to(tmp_path / "elsewhere")
    assert load(tmp_path) is None


def test_a_symlinked_dockerfile_pointing_out_of_the_repository_is_refused(tmp_path: Path) -> None:
    outside = write(tmp_path, "secret/Dockerfile", "FROM debian:12\nCOPY . /\n")
    repo = tmp_path / "repo"
    write(repo, WHERE, json.dumps({"build": {"dockerfile": "Dockerfile"}}))
    (repo / ".devcontainer" / "Dockerfile").symlink_to(outside)
    with pytest.raises(DevContainerError) as e:
        load(repo)
    assert e.value.sentence == "the Dockerfile .devcontainer/Dockerfile is, or lies under, a symlink: not followed"


def test_a_build_context_reached_through_a_symlink_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write(repo, WHERE, json.dumps({"build": {"dockerfile": "Dockerfile", "context": "ctx/app"}}))
    write(repo, ".devcontainer/Dockerfile", "FROM debian:12\n")
    (tmp_path / "host").mkdir()
    (repo / ".devcontainer" / "ctx").symlink_to(tmp_path / "host")
    (tmp_path / "host" / "app").mkdir()
    with pytest.raises(DevContainerError, match="build context .devcontainer/ctx/app is, or lies under, a symlink"):
        load(repo)


def test_a_build_whose_files_are_plain_loads(tmp_path: Path) -> None:
    write(tmp_path, WHERE, json.dumps({"build": {"dockerfile": "../docker/Dockerfile", "context": "../docker"}}))
    write(tmp_path, "docker/Dockerfile", "FROM debian:12\n")
    config = load(tmp_path)
    assert config is not None and config.build == Build(dockerfile="docker/Dockerfile", context="docker")


def test_a_missing_context_and_a_dockerfile_that_is_a_folder_are_refused(tmp_path: Path) -> None:
    write(tmp_path, WHERE, json.dumps({"build": {"dockerfile": "Dockerfile", "context": "nope"}}))
    write(tmp_path, ".devcontainer/Dockerfile", "FROM debian:12\n")
    with pytest.raises(DevContainerError, match="build context .devcontainer/nope is not in the repository"):
        load(tmp_path)
    write(tmp_path, WHERE, json.dumps({"build": {"dockerfile": "sub"}}))
    (tmp_path / ".devcontainer" / "sub").mkdir()
    with pytest.raises(DevContainerError, match="Dockerfile .devcontainer/sub is not a regular file"):
        load(tmp_path)


def test_an_oversized_dockerfile_is_refused(tmp_path: Path) -> None:
    write(tmp_path, WHERE, json.dumps({"build": {"dockerfile": "Dockerfile"}}))
    os.truncate(write(tmp_path, ".devcontainer/Dockerfile", "FROM debian:12\n"), MAX_DOCKERFILE + 1)
    with pytest.raises(DevContainerError, match=f"Dockerfile .devcontainer/Dockerfile is larger than {MAX_DOCKERFILE}"):
        load(tmp_path)


def test_an_oversized_or_binary_configuration_is_refused_unread(tmp_path: Path) -> None:
    path = write(tmp_path, WHERE, doc())
    os.truncate(path, MAX_CONFIG + 1)
    with pytest.raises(DevContainerError, match=f"larger than {MAX_CONFIG} bytes: not read"):
        load(tmp_path)
    write(tmp_path, WHERE, b'{"image": "\xff"}')
    with pytest.raises(DevContainerError, match="is not UTF-8 text"):
        load(tmp_path)


def test_a_fifo_in_the_files_place_is_refused_without_blocking(tmp_path: Path) -> None:
    (tmp_path / ".devcontainer").mkdir()
    os.mkfifo(tmp_path / WHERE)
    with pytest.raises(DevContainerError, match="is not a regular file"):
        load(tmp_path)


# ------------------------------------------------------------------------------------------------ lockfiles


def test_lockfiles_are_the_digests_of_the_well_known_files_at_the_root(tmp_path: Path) -> None:
    files = {"package-lock.json": b'{"lockfileVersion": 3}', "requirements-dev.txt": b"pytest==8\n",
             "go.sum": b"x v1 h1:abc\n", "pyproject.toml": b"[project]\nname='x'\n"}
    for name, body in files.items():
        write(tmp_path, name, body)
    write(tmp_path, "README.md", "not an input")
    write(tmp_path, "sub/yarn.lock", "not at the root")
    (tmp_path / "Cargo.lock").mkdir()
    digests = lockfiles(tmp_path)
    assert digests == {name: "sha256:" + hashlib.sha256(body).hexdigest() for name, body in files.items()}
    write(tmp_path, "go.sum", "x v1 h1:def\n")
    assert lockfiles(tmp_path)["go.sum"] != digests["go.sum"]


def test_a_symlinked_lockfile_is_never_followed(tmp_path: Path) -> None:
    write(tmp_path, "outside/secret", "the host's file")
    repo = tmp_path / "repo"
    write(repo, "yarn.lock", "# yarn\n")
    (repo / "package-lock.json").symlink_to(tmp_path / "outside" / "secret")
    (repo / "requirements.txt").symlink_to(repo / "yarn.lock")
    assert set(lockfiles(repo)) == {"yarn.lock"}


def test_a_lockfile_over_the_cap_is_refused_rather_than_left_out_of_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, "Cargo.lock", "")
    os.truncate(path, MAX_LOCKFILE + 1)
    with pytest.raises(DevContainerError, match="over the .*-byte cap for a lockfile") as e:
        lockfiles(tmp_path)
    assert e.value.path == "Cargo.lock"


def test_an_images_metadata_label_is_read_for_what_a_run_depends_on_and_nothing_else() -> None:
    label = json.dumps([{"id": "ghcr.io/x/feature:1", "privileged": True, "mounts": ["source=/,target=/host"],
                         "postStartCommand": "dockerd", "onCreateCommand": ["apt-get", "update"]},
                        {"remoteUser": "vscode", "containerEnv": {"A": "1"}, "remoteEnv": {"B": None}}])
    first, second = image_metadata(label, image="team/dev:1")
    assert first.on_create == Command(argv=("apt-get", "update")) and first.remote_user is None
    assert second.remote_user == "vscode" and second.container_env == {"A": "1"} and second.remote_env == {"B": None}
    assert image_metadata(json.dumps({"containerUser": "node"}), image="i")[0].container_user == "node"  # one object


@pytest.mark.parametrize("label, says", [
    ("not json", "is not valid JSON"),
    ("[1]", "(entry 1): must be a JSON object"),
    (json.dumps([{}, {"remoteUser": "a b"}]), "(entry 2): "),
    (json.dumps([{"containerEnv": {"HOME": "${localEnv:HOME}"}}]), "which is the host's"),
])
def test_a_metadata_label_flower_cannot_read_names_the_image_and_the_entry(label: str, says: str) -> None:
    with pytest.raises(DevContainerError, match="^the devcontainer.metadata label of team/dev:1") as e:
        image_metadata(label, image="team/dev:1")
    assert says in str(e.value)

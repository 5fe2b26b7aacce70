"""The Docker Engine, reached through the `docker` SDK (imported lazily: the orchestrating side
must import without it), and the image build with a streamed log."""
from __future__ import annotations

import fcntl
import re
import time
from dataclasses import dataclass

from mha_ci.containers.context import assemble, contexts_dir
from mha_ci.containers.images import LOCAL_REGISTRY, ImageSpec, content_digest, registry
from mha_ci.errors import EnvironmentProblem

START_DOCKERD = ("start dockerd: `sudo dockerd >/tmp/dockerd.log 2>&1 &` or "
                 "`sudo systemctl start docker` (CI: .ci/docker-setup.sh), "
                 "or point DOCKER_HOST at a running daemon")
# Labels every image carries, read back into each result's provenance.
LABEL_BASE_REF, LABEL_BASE_DIGEST = "mha-ci.base-image", "mha-ci.base-digest"
# The content digest of the inputs an image was built from (images.content_digest). A tag is only
# a name: anyone who can push to the registry or run `docker tag` here can put another image under
# it, so an image is used only when this label says it was built from the checkout's inputs.
LABEL_CONTENT_DIGEST = "mha-ci.content-digest"


def connect():
    """A docker client, or EnvironmentProblem (exit 3) saying how to start the daemon."""
    try:
        import docker  # optional: the docker SDK
    except ImportError as e:
        raise EnvironmentProblem("the docker executor needs the `docker` Python package "
                                 "(pip install -r requirements-dev.lock)") from e
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as e:   # DockerException, requests ConnectionError, bad DOCKER_HOST URL
        raise EnvironmentProblem(f"docker daemon unreachable ({type(e).__name__}: {e}); "
                                 f"{START_DOCKERD}") from e
    return client


class BuildFailed(EnvironmentProblem):
    """An image build failed; the message names the Dockerfile step that failed."""


def image_digest(image) -> str:
    """The registry digest when the image came from a registry, else the local id."""
    digests = image.attrs.get("RepoDigests") or []
    return digests[0] if digests else f"local:{image.id}"


@dataclass(frozen=True)
class BuiltImage:
    tag: str                    # the spec's reference (registry/name:content-digest)
    id: str
    base_ref: str
    base_digest: str
    built: bool                 # False when an existing image with this tag was reused
    seconds: float
    pulled: bool = False        # True when it came from the registry of the reference


def base_image(client, spec: ImageSpec):
    import docker.errors  # optional: the docker SDK

    ref = spec.base_image
    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        hint = ("make it with containers/make-base-image.sh" if ref.startswith("mha-ci/")
                else "pull it on a machine that reaches the registry (docker pull, docker save | "
                     "docker load)")
        raise EnvironmentProblem(f"base image {ref} of {spec.dockerfile} is missing: {hint}")


def _base_digest_of(image) -> str:
    """The base digest an image was built from (its label), for results of a pulled image."""
    return (image.labels or {}).get(LABEL_BASE_DIGEST, "unknown")


def ensure_image(client, spec: ImageSpec, *, force: bool = False, build: bool = True,
                 log=print) -> BuiltImage:
    """The image for `spec`: the local one with its reference, else pulled from the reference's
    registry (when one is configured), else built (when `build`); force: always build. An image
    found or pulled whose content-digest label differs from the checkout's is never used: it is
    rebuilt (when `build`), else EnvironmentProblem (exit 3)."""
    t0 = time.monotonic()
    tag = spec.reference()
    build_it = (f"`mha-ci containers build --toolchain {spec.toolchain} --platform {spec.platform}`")
    if not force:
        found, pulled = _here_or_pulled(client, spec, tag, log)
        mismatch = None if found is None else digest_mismatch(found, spec)
        if found is not None and mismatch is None:
            return BuiltImage(tag, found.id, spec.base_image, _base_digest_of(found), False,
                              time.monotonic() - t0, pulled=pulled)
        if mismatch is not None:
            where = "pulled from its registry" if pulled else "found on this machine"
            if not build:
                raise EnvironmentProblem(f"image {tag} {where} is not the one the checkout pins: {mismatch}; "
                                         f"build it here with {build_it}")
            log(f"image {tag} {where} is not the one the checkout pins ({mismatch}): rebuilding it")
            force = True
    if not build:
        raise EnvironmentProblem(f"image {tag} is neither here nor in its registry: build it with {build_it}")
    base = base_image(client, spec)
    locks = contexts_dir(spec)
    locks.mkdir(parents=True, exist_ok=True)
    # One build per image at a time (two jobs, or two test sessions, may ask at once); the
    # context folder is shared, and the second one finds the first one's image when it gets in.
    with open(locks / f".{spec.name}.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        existing = None if force else _existing(client, tag)
        if existing is not None:
            return BuiltImage(tag, existing.id, spec.base_image, _base_digest_of(existing), False,
                              time.monotonic() - t0)
        return _build_locked(client, spec, base, tag, t0, log)


def digest_mismatch(image, spec: ImageSpec) -> str | None:
    """Why `image` is not the build of `spec`'s inputs (None when its content-digest label says it is)."""
    expected = content_digest(spec)
    found = (image.labels or {}).get(LABEL_CONTENT_DIGEST)
    if found == expected:
        return None
    return (f"its content digest is {found}, the checkout's is {expected}" if found
            else f"it carries no {LABEL_CONTENT_DIGEST} label, the checkout's content digest is {expected}")


def _existing(client, tag: str):
    import docker.errors  # optional: the docker SDK

    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def _here_or_pulled(client, spec: ImageSpec, reference: str, log):
    """(image, pulled): the image under `reference` on this machine, else (with a registry set)
    the same content digest built here under the local name and tagged anew, else pulled;
    (None, False) when none of these has it."""
    image = _existing(client, reference)
    if image is not None or registry() == LOCAL_REGISTRY:
        return image, False
    local = _existing(client, spec.reference(LOCAL_REGISTRY))
    if local is not None and digest_mismatch(local, spec) is None:
        local.tag(*reference.rsplit(":", 1))
        return client.images.get(reference), False
    image = pull(client, reference, log)
    return image, image is not None


def pull(client, reference: str, log=print):
    """The image `reference` pulled from its registry, or None when the registry lacks it.
    An unreachable registry is an EnvironmentProblem: 'not there' and 'cannot ask' differ."""
    import docker.errors  # optional: the docker SDK

    try:
        log(f"pulling {reference}")
        return client.images.pull(reference)
    except docker.errors.APIError as e:
        if _not_in_registry(e):
            return None
        raise EnvironmentProblem(f"pulling {reference} failed: {e}") from e


def in_registry(client, reference: str) -> bool:
    """Whether the registry holds `reference` (asks the registry, downloads nothing)."""
    import docker.errors  # optional: the docker SDK

    try:
        client.images.get_registry_data(reference)
        return True
    except docker.errors.APIError as e:
        if _not_in_registry(e):
            return False
        raise EnvironmentProblem(f"asking the registry for {reference} failed: {e}") from e


def _not_in_registry(error) -> bool:
    """A registry's 'no such image' (NotFound, or an APIError saying so), not a failure to ask."""
    import docker.errors  # optional: the docker SDK

    text = str(error)
    return (isinstance(error, docker.errors.NotFound) or "manifest unknown" in text
            or "not found" in text.lower())


def push(client, reference: str, log=print) -> None:
    """Push a local image to the registry its reference names; a refused push is an error."""
    repository, tag = reference.rsplit(":", 1)
    for chunk in client.images.push(repository, tag=tag, stream=True, decode=True):
        if "error" in chunk:
            detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
            raise EnvironmentProblem(f"pushing {reference} failed: {detail}")
        if "aux" in chunk and "Digest" in chunk["aux"]:
            log(f"pushed {reference} ({chunk['aux']['Digest']})")


def _build_locked(client, spec: ImageSpec, base, tag: str, t0: float, log) -> BuiltImage:
    log(f"building {tag} from {spec.dockerfile} (base {spec.base_image})")
    ctx = assemble(spec, log=log)
    image_id = _build(client, spec, ctx.path, tag, labels={
        LABEL_BASE_REF: spec.base_image, LABEL_BASE_DIGEST: image_digest(base),
        LABEL_CONTENT_DIGEST: content_digest(spec)}, log=log)
    seconds = time.monotonic() - t0
    log(f"built {tag} ({image_id[:19]}) in {seconds:.0f} s")
    return BuiltImage(tag, image_id, spec.base_image, image_digest(base), True, seconds)


_STEP = re.compile(r"^Step \d+/\d+ : ")
_LAYER = re.compile(r"^ ---> ([0-9a-f]{12})$")


def _build(client, spec: ImageSpec, path, tag: str, labels: dict[str, str], log) -> str:
    """Run the build through the low-level API so that the log streams line by line."""
    prefix = f"[build {spec.name}] "
    step, image_id = "(before the first step)", None
    tail: list[str] = []
    # Last layer of each earlier stage of a multi-stage build: left behind as an untagged
    # image (2 GB for the wheel-installing stage), so it is removed after a successful build.
    last_layer, stage_ends, froms = None, [], 0
    stream = client.api.build(path=str(path), tag=tag, rm=True, forcerm=True, pull=False,
                              decode=True, labels=labels, buildargs=spec.build_args or None,
                              network_mode=spec.build_network)
    for chunk in stream:
        if "stream" in chunk:
            for line in chunk["stream"].splitlines():
                if _STEP.match(line):
                    step = line
                    if line.split(" : ", 1)[1].upper().startswith("FROM "):
                        froms += 1
                        if froms > 1 and last_layer:
                            stage_ends.append(last_layer)
                m = _LAYER.match(line)
                if m:
                    last_layer = m.group(1)
                if line.strip():
                    tail = (tail + [line])[-20:]
                    log(prefix + line)
        if "aux" in chunk and "ID" in chunk["aux"]:
            image_id = chunk["aux"]["ID"]
        if "error" in chunk:
            detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
            raise BuildFailed(f"building {tag} from {spec.dockerfile} failed at {step}: "
                              f"{detail.strip()}\nlast lines of the build log:\n" + "\n".join(tail))
    if image_id is None:
        image_id = client.images.get(tag).id
    for layer in stage_ends:
        try:
            client.images.remove(layer)
        except Exception as e:   # in use by another image, or already gone: not our problem
            log(f"{prefix}note: intermediate stage {layer} kept ({e})")
    return image_id

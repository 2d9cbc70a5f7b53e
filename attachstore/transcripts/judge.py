"""Whether a provider would take an inline image, and if not, the version it would: the gate run exactly with
the provider's limits (a refusal is the provider's), then with the store's own limits and `oversize = "fit"`
(the fitted version, which every provider takes in a request of one image). Nothing is stored here."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from ..errors import Rejected
from ..service import Store, Upload
from ..service.validation import Admitted, Validator
from .provider import Limits

FIT_MAX_SIDE = 65_500  # a screenshot 9000 px long is fitted: the pixel bound, not the side, bounds memory


@dataclass(frozen=True, slots=True)
class Keep:
    media_type: str
    width: int
    height: int


@dataclass(frozen=True, slots=True)
class Fit:
    why: str  # the provider's refusal, as the gate's code
    data: bytes
    media_type: str
    width: int
    height: int
    source: tuple[str, int, int] | None = None  # what the bytes were, as the gate decoded them


@dataclass(frozen=True, slots=True)
class Drop:
    code: str
    message: str


Verdict = Keep | Fit | Drop


class Judge:
    def __init__(self, store: Store, limits: Limits, tenant: str) -> None:
        self.store = store
        self.limits = limits
        self.tenant = tenant
        config = store.config
        admission = msgspec.structs.replace(
            config.admission, oversize="fit", fit_max_side=max(config.admission.fit_max_side, FIT_MAX_SIDE)
        )
        self._fitting = store.validator(msgspec.structs.replace(config, admission=admission))
        self._config = config

    def _provider(self, images: int) -> Validator:
        # The provider's limits, within the bounds the decoder keeps memory to.
        config, limits = self._config, self.limits
        fit = config.admission
        gate_limits = msgspec.structs.replace(
            config.limits,
            max_side=min(limits.side_for(images), FIT_MAX_SIDE),
            max_pixels=min(limits.pixels, fit.fit_max_pixels),
            max_image_bytes=min(limits.image_bytes, max(fit.fit_max_bytes, config.limits.max_image_bytes)),
        )
        judged = msgspec.structs.replace(config, limits=gate_limits)
        return self.store.validator(judged)

    async def judge(self, data: bytes, declared: str | None, images: int) -> Verdict:
        if not self.limits.vision:
            return Drop("MODALITY_UNSUPPORTED", f"the model {self.limits.model!r} does not accept images")
        found = await self._one(self._provider(images), Upload.of_bytes(data, declared), exact=True)
        if isinstance(found, Admitted):
            kind = found.inspection.media_type
            if kind in self.limits.formats:
                return Keep(kind, found.inspection.width, found.inspection.height)
            why = "UNSUPPORTED_IMAGE_TYPE"
        else:
            why = found.code
        # The bytes decide what the image is: a declared type that disagrees is what was wrong.
        fitted = await self._one(self._fitting, Upload.of_bytes(data), exact=False)
        if isinstance(fitted, Rejected):
            return Drop(fitted.code, fitted.message)
        inspection = fitted.inspection
        if inspection.media_type not in self.limits.formats:
            return Drop("UNSUPPORTED_IMAGE_TYPE", f"{self.limits.provider} takes no {inspection.media_type}")
        was = inspection.original
        source = None if was is None else (was.media_type, was.width, was.height)
        shown = (inspection.media_type, inspection.width, inspection.height)
        return Fit(why, bytes(fitted.data), *shown, source)

    async def _one(self, validator: Validator, upload: Upload, *, exact: bool) -> Admitted | Rejected:
        error, verdicts = await validator.validate(
            [upload], "user", None, every_image=True, tenant=self.tenant, exact=exact
        )
        return error or verdicts[0]

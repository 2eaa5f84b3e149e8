"""Handlers of review: what memory learned, listed with its reasons, and the user's word on it
(accept, reject, edit)."""

from __future__ import annotations

from typing import Any

from memctl import protocol as p
from memoryd import review
from memoryd.server.context import DaemonContext, Handler


def review_list(ctx: DaemonContext, req: p.Review) -> p.ReviewResult:
    default = ctx.capture.default_preset if ctx.capture else "balanced"
    return review.list_items(ctx.registry.get(req.project), default, req.limit)


def review_accept(ctx: DaemonContext, req: p.ReviewAccept) -> p.ReviewDecisionResult:
    return review.accept(ctx.registry.get(req.project), req.ids)


def review_reject(ctx: DaemonContext, req: p.ReviewReject) -> p.ReviewDecisionResult:
    return review.reject(ctx.registry.get(req.project), req.ids, req.reason)


def review_edit(ctx: DaemonContext, req: p.ReviewEdit) -> p.ReviewDecisionResult:
    return review.edit(ctx.registry.get(req.project), req.target, req.content)


def session(ctx: DaemonContext, req: p.SessionShow) -> p.SessionResult:
    return review.session(ctx.registry.get(req.project), req.session_id)


HANDLERS: dict[type[p.Request[Any]], Handler] = {
    p.Review: review_list,
    p.ReviewAccept: review_accept,
    p.ReviewReject: review_reject,
    p.ReviewEdit: review_edit,
    p.SessionShow: session,
}

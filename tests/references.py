"""Plain, slow, obviously correct references for the executor's numerics (tests only).

Nothing here uses the executor, the stage worker or the methods package:

- :func:`gradient_accumulation` is one-device training with gradient accumulation, the
  definition every synchronous pipeline must reproduce bitwise.
- :func:`hand_pipeline` runs a Linear/ReLU network stage by stage with the backward
  products written out as matrix formulas, keeping *every* weight version of every stage
  (no stash bookkeeping, no reference counts), and picks the backward's weights straight
  from the definitions: stash -> the forward's version, 2bw -> version max(k-1, 0),
  async -> the newest version, T2 -> newest - d * delta.
"""

from __future__ import annotations

import torch

from pipemare_lite.analysis.staleness import expected_forward_delay
from pipemare_lite.analysis.theory import stability_bound


def gradient_accumulation(model, optimizer, loss_fn, microbatches, num_microbatches,
                          num_minibatches):
    """``for mb in minibatch: (loss(mb) / N).backward()``, then step and zero, per minibatch.

    Returns the unscaled loss of every microbatch, in order.
    """
    losses = []
    for k in range(num_minibatches):
        for j in range(num_microbatches):
            x, target = microbatches[k * num_microbatches + j]
            loss = loss_fn(model(x), target)
            (loss / num_microbatches).backward()
            losses.append(loss.item())
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return losses


def topological_order(schedule):
    """Some order of all actions that respects each rank's order and the data dependencies."""
    last = schedule.num_virtual_stages - 1
    done, order = set(), []
    positions = [0] * schedule.num_ranks
    total = sum(len(row) for row in schedule.ranks)
    while len(order) < total:
        before = len(order)
        for rank, row in enumerate(schedule.ranks):
            while positions[rank] < len(row):
                a = row[positions[rank]]
                s, m = a.stage, a.index
                if a.kind == "F":
                    ok = s == 0 or (s - 1, "F", m) in done
                elif a.kind in ("B", "I"):
                    ok = (s, "F", m) in done and (
                        s == last or (s + 1, "B", m) in done or (s + 1, "I", m) in done)
                elif a.kind == "W":
                    ok = (s, "I", m) in done
                else:
                    ok = True
                if not ok:
                    break
                done.add((s, a.kind, m) if a.kind != "U" else (s, "U", a.index))
                order.append(a)
                positions[rank] += 1
        assert len(order) > before, "schedule deadlocks"
    return order


def hand_pipeline(schedule, stage_layers, microbatches, *, lr, momentum=0.0, gamma=None,
                  lr_of=None):
    """Run ``schedule`` on a Linear/ReLU network with hand-written forward and backward.

    Args:
        stage_layers: per stage a list of ``(W, b, relu)``: ``y = x @ W.T + b``, then ReLU
            when ``relu``. Tensors are copied (float64 recommended).
        microbatches: ``[(x, target)]``; the loss is ``mean((y - target) ** 2)``.
        lr, momentum: plain SGD, ``buf = momentum * buf + g`` (``buf = g`` at first),
            ``w = w - lr * buf``. ``lr_of(stage, k)`` overrides ``lr`` per update.
        gamma: T2 on (with this gamma, or one per stage) for weight mode async; None = off.

    Returns ``(losses by microbatch, final weights per stage as [(W, b)])``.
    """
    mode, n_mb = schedule.weight_mode, schedule.num_microbatches
    last = schedule.num_virtual_stages - 1
    # history[s][v] = list of (W, b) after v updates
    history = [[[(w.clone(), b.clone()) for w, b, _ in layers]] for layers in stage_layers]
    relus = [[r for _, _, r in layers] for layers in stage_layers]
    delta = [[(torch.zeros_like(w), torch.zeros_like(b)) for w, b, _ in layers]
             for layers in stage_layers]
    buffers = [None] * len(stage_layers)
    accum = [None] * len(stage_layers)
    forward_version, saved, outgoing, grads, losses = {}, {}, {}, {}, {}
    for a in topological_order(schedule):
        s, m = a.stage, a.index
        if a.kind == "F":
            v = max(m // n_mb - 1, 0) if mode == "2bw" else len(history[s]) - 1
            forward_version[(s, m)] = v
            h = microbatches[m][0] if s == 0 else outgoing.pop((s - 1, m))
            inputs, masks = [], []
            for (w, b), relu in zip(history[s][v], relus[s]):
                inputs.append(h)
                h = h @ w.T + b
                masks.append(h > 0 if relu else None)
                h = torch.where(h > 0, h, torch.zeros_like(h)) if relu else h
            saved[(s, m)] = (inputs, masks)
            if s == last:
                target = microbatches[m][1]
                losses[m] = ((h - target) ** 2).mean().item()
                grads[(s, m)] = 2 * (h - target) / h.numel() / n_mb
            else:
                outgoing[(s, m)] = h
        elif a.kind in ("B", "I"):  # W reads no weights: the whole backward is done here
            v_f, newest = forward_version[(s, m)], len(history[s]) - 1
            if mode in ("stash", "2bw"):
                weights = history[s][v_f]
            elif gamma is not None:
                d = newest - v_f
                weights = [(w - d * dw, b - d * db)
                           for (w, b), (dw, db) in zip(history[s][newest], delta[s])]
            else:
                weights = history[s][newest]
            g = grads.pop((s, m))
            inputs, masks = saved.pop((s, m))
            layer_grads = []
            for i in reversed(range(len(weights))):
                if masks[i] is not None:
                    g = g * masks[i]
                layer_grads.append((g.T @ inputs[i], g.sum(0)))  # weight grads: saved input
                g = g @ weights[i][0]                              # input grad: chosen W
            layer_grads.reverse()
            if accum[s] is None:
                accum[s] = layer_grads
            else:
                accum[s] = [(aw + gw, ab + gb) for (aw, ab), (gw, gb) in zip(accum[s], layer_grads)]
            if s > 0:
                grads[(s - 1, m)] = g
        elif a.kind == "U":
            k = len(history[s]) - 1
            rate = lr if lr_of is None else lr_of(s, k)
            if buffers[s] is None or momentum == 0:
                buffers[s] = accum[s]
            else:
                buffers[s] = [(momentum * bw + gw, momentum * bb + gb)
                              for (bw, bb), (gw, gb) in zip(buffers[s], accum[s])]
            old = history[s][k]
            new = [(w - rate * bw, b - rate * bb) for (w, b), (bw, bb) in zip(old, buffers[s])]
            history[s].append(new)
            accum[s] = None
            if gamma is not None:
                g_s = gamma[s] if isinstance(gamma, (list, tuple)) else gamma
                delta[s] = [(g_s * dw + (1 - g_s) * (nw - ow),
                             g_s * db + (1 - g_s) * (nb - ob))
                            for (dw, db), (nw, nb), (ow, ob) in zip(delta[s], new, old)]
    return [losses[m] for m in sorted(losses)], [h[-1] for h in history]


def stashed_weights_sgd(schedule, stage_modules, microbatches, loss_fn, optimizer_factory):
    """PipeDream's definition for any model: delayed SGD, each gradient at its forward's weights.

    Every stage keeps a list of all its weight versions (dicts name -> tensor). F(m) runs the
    stage with ``torch.func.functional_call`` on fresh leaf copies of the current version;
    B(m) differentiates that same graph (so forward and backward see one version, the
    stashed one); gradients are summed in backward order and handed to a standard optimizer
    on the live weights at U. The loss of microbatch m is ``loss_fn(out, target) / N``.

    Returns ``(losses by microbatch, final state per stage as name -> tensor)``.
    """
    n_mb, last = schedule.num_microbatches, schedule.num_virtual_stages - 1
    live = [{n: p.detach().clone().requires_grad_(True) for n, p in m.named_parameters()}
            for m in stage_modules]
    optimizers = [optimizer_factory(list(params.values())) for params in live]
    history = [[{n: p.detach().clone() for n, p in params.items()}] for params in live]
    graphs, outgoing, grads, accum, losses = {}, {}, {}, [None] * len(live), {}
    for a in topological_order(schedule):
        s, m = a.stage, a.index
        if a.kind == "F":
            leaves = {n: t.clone().requires_grad_(True) for n, t in history[s][-1].items()}
            x = microbatches[m][0] if s == 0 else outgoing.pop((s - 1, m))
            x = x.detach().requires_grad_(s > 0)
            out = torch.func.functional_call(stage_modules[s], leaves, (x,))
            if s == last:
                loss = loss_fn(out, microbatches[m][1])
                losses[m] = loss.item()
                out = loss / n_mb
            else:
                outgoing[(s, m)] = out.detach()
            graphs[(s, m)] = (x, out, leaves)
        elif a.kind in ("B", "I"):
            x, out, leaves = graphs.pop((s, m))
            inputs = list(leaves.values()) + ([x] if s > 0 else [])
            result = torch.autograd.grad(out, inputs, None if s == last else grads.pop((s, m)))
            weight_grads = list(result[:len(leaves)])
            if s > 0:
                grads[(s - 1, m)] = result[-1]
            accum[s] = weight_grads if accum[s] is None else [
                acc + g for acc, g in zip(accum[s], weight_grads)]
        elif a.kind == "U":
            for p, g in zip(live[s].values(), accum[s]):
                p.grad = g
            optimizers[s].step()
            optimizers[s].zero_grad(set_to_none=True)
            accum[s] = None
            history[s].append({n: p.detach().clone() for n, p in live[s].items()})
    return [losses[k] for k in sorted(losses)], [h[-1] for h in history]


def hand_delays(row, stage: int) -> dict[int, int]:
    """``microbatch -> updates of stage between F(m) and B(m)``, counted along ``row`` (the
    rank's actions): the plain count an asynchronous backward's distance is checked against."""
    updates, at, delays = 0, {}, {}
    for a in row:
        if a.stage != stage:
            continue
        if a.kind == "U":
            updates += 1
        elif a.kind == "F":
            at[a.index] = updates
        elif a.kind == "B":
            delays[a.index] = updates - at[a.index]
    return delays


def largest_stable_pipeline_by_search(step: float, num_microbatches: int,
                                      max_stages: int = 1_000_000) -> int:
    """The engine's ``largest_stable_pipeline`` by its definition: try P = 1, 2, ... while
    stage 0, ``expected_forward_delay("async", P, N, 0)`` updates stale, is strictly below
    the bound.
    The delay grows with P and the bound shrinks with the delay, so the stable P form
    1, 2, ..., answer. Slow for small steps (the answer grows like 1 / step).
    """
    if num_microbatches < 1:
        raise ValueError(f"num_microbatches must be >= 1, got {num_microbatches}")
    P = 0
    while step < stability_bound(expected_forward_delay("async", P + 1, num_microbatches, 0)):
        P += 1
        if P >= max_stages:
            raise ValueError(f"step {step} is stable beyond {max_stages} stages; "
                             "give a larger step or a larger max_stages")
    return P

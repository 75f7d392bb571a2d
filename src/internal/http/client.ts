/**
 * The typed client of `effect-agent/HttpApi` (APP-05): the `HttpApiClient` derived from the API's
 * definition, with the two routes that answer a turn's result mapped back to what `agent.run`
 * gives. Over HTTP a turn that ended other than `completed` is a `200` with its `reason` (the HTTP
 * call succeeded); the client fails it `TurnFailed` with the result as `partial`, as `run` does in
 * process, so a caller handles a failed turn in one place whichever side of the wire it is on.
 *
 * @internal
 */
import { HttpApiClient } from "@effect/platform"
import type { HttpClient } from "@effect/platform"
import type { Redacted } from "effect"
import { Effect } from "effect"
import { TurnFailed } from "../../AgentError.js"
import type { RunAccepted } from "../../SessionGateway.js"
import type { TurnResult } from "../../TurnResult.js"
import { Api } from "./api.js"
import { withToken } from "./sse.js"

type Base = Effect.Effect.Success<ReturnType<typeof derive>>
type Sessions = Base["sessions"]
type RequestOf<F extends (request: any) => any> = Omit<Parameters<F>[0], "withResponse">
type ErrorOf<F extends (request: any) => Effect.Effect<any, any, any>> = Effect.Effect.Error<ReturnType<F>>

/**
 * The typed client: `HttpApiClient`'s, where `sessions.run` and `sessions.turn` fail `TurnFailed`
 * for a turn that did not complete (with the whole result as `partial`).
 *
 * @internal
 */
export type Client = Omit<Base, "sessions"> & {
  readonly sessions: Omit<Sessions, "run" | "turn"> & {
    readonly run: (
      request: RequestOf<Sessions["run"]>
    ) => Effect.Effect<TurnResult | RunAccepted, ErrorOf<Sessions["run"]> | TurnFailed>
    readonly turn: (
      request: RequestOf<Sessions["turn"]>
    ) => Effect.Effect<TurnResult, ErrorOf<Sessions["turn"]> | TurnFailed>
  }
}

const derive = (options: { readonly baseUrl: string | URL; readonly token?: Redacted.Redacted | undefined }) =>
  HttpApiClient.make(Api, { baseUrl: options.baseUrl, transformClient: withToken(options.token) })

/** APP-05: a result whose turn did not complete fails as `agent.run` fails it. */
const completedOrFailed = (id: string) => <A extends TurnResult | RunAccepted>(outcome: A): Effect.Effect<A, TurnFailed> =>
  "_tag" in outcome || outcome.reason.kind === "completed"
    ? Effect.succeed(outcome)
    : Effect.fail(new TurnFailed({ id, turn: outcome.turn, reason: outcome.reason, partial: outcome }))

/** @internal */
export const make = (options: {
  readonly baseUrl: string | URL
  readonly token?: Redacted.Redacted | undefined
}): Effect.Effect<Client, never, HttpClient.HttpClient> =>
  Effect.map(derive(options), (client): Client => {
    const sessions = client.sessions
    return {
      ...client,
      sessions: {
        ...sessions,
        run: (request) => Effect.flatMap(sessions.run(request), completedOrFailed(request.path.id)),
        turn: (request) => Effect.flatMap(sessions.turn(request), completedOrFailed(request.path.id))
      }
    }
  })

/**
 * The inspector (SPEC §18, INS-01, INS-02): its files and registry snapshot over real HTTP on
 * 127.0.0.1, and the page itself in headless Chromium (Debian's `chromium`, driven by
 * `playwright-core` with the system executable; no browser download) against a server with seeded
 * sessions and a scripted model.
 *
 * Without Chromium the browser test is skipped locally with a message and fails when `CI` is set
 * (`.ci/run` sets it and installs Chromium).
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Deferred, Effect, Option, Redacted, Schema, TestClock } from "effect"
import * as fs from "node:fs"
import * as http from "node:http"
import * as path from "node:path"
import type { Browser, Page } from "playwright-core"
import { chromium } from "playwright-core"
import type { SessionId } from "../src/Message.js"
import * as Model from "../src/Model.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import * as Tool from "../src/Tool.js"
import { tempDirectory } from "./fixtures/backends.js"
import { openTurn } from "./fixtures/cliSessions.js"
import type { Store } from "./fixtures/host.js"
import type { Served } from "./fixtures/httpServer.js"
import { fileStore, request, serve } from "./fixtures/httpServer.js"
import { header } from "./fixtures/persistenceConformance.js"

const route = { provider: "scripted", model: "test" }

/** Where Chromium is: `CHROMIUM_PATH`, else Debian's package. */
const chromiumPath = process.env["CHROMIUM_PATH"] ?? "/usr/bin/chromium"
const hasChromium = fs.existsSync(chromiumPath)
const ci = process.env["CI"]
const inCi = ci !== undefined && ci !== "" && ci !== "0" && ci.toLowerCase() !== "false"
if (!hasChromium && !inCi) {
  // eslint-disable-next-line no-console
  console.warn(
    `INS-02 skipped: no Chromium at ${chromiumPath}. Install Debian's package (apt-get install chromium) or set CHROMIUM_PATH; .ci/run installs it`
  )
}

/** A tool the seeded session calls: reads a "file" of the test's. */
const readFile = Tool.make({
  name: "read_file",
  description: "Reads a file of the workspace.",
  parameters: Schema.Struct({ path: Schema.String, lines: Schema.Number }),
  run: ({ lines, path }) => Effect.succeed(Tool.text(`${path}: ${lines} lines\n1. ship the inspector\n2. test it`))
})

/** The stored log of a session, as the store has it. */
const storedEvents = (store: Store, id: string) =>
  Effect.map(
    Effect.orDie(Context.get(store.context, SessionPersistence).read(id as SessionId)),
    (stored) => stored.events
  )

const textOf = (content: ReadonlyArray<{ readonly type: string; readonly text?: string }>) =>
  content.map((part) => part.text ?? "").join("")

/** A GET with the path sent as written (no URL normalisation, unlike `fetch`): for traversal attempts. */
const rawGet = (url: string, rawPath: string) =>
  Effect.async<{ readonly status: number; readonly body: string }>((resume) => {
    const { hostname, port } = new URL(url)
    const req = http.request({ host: hostname, port, path: rawPath, method: "GET" }, (response) => {
      let body = ""
      response.setEncoding("utf8")
      response.on("data", (chunk: string) => (body += chunk))
      response.on("end", () => resume(Effect.succeed({ status: response.statusCode ?? 0, body })))
    })
    req.on("error", (error) => resume(Effect.die(error)))
    req.end()
  })

interface RegistryNode {
  readonly id: string
  readonly status: string
  readonly owner: string | null
  readonly initiator: string | null
}

/**
 * The registry snapshot once it shows what the test waits for: the server takes initiators from
 * the registry's event feed on a fiber of its own, so a snapshot taken at once may not have the
 * last one yet. Re-asked (no timer) until `ready`.
 */
const registryWhen = (
  served: Served,
  headers: Record<string, string>,
  ready: (agents: ReadonlyArray<RegistryNode>) => boolean
) =>
  Effect.gen(function*() {
    for (let attempt = 0; attempt < 500; attempt++) {
      const reply = yield* request(`${served.url}/inspector/api/registry`, { headers })
      assert.strictEqual(reply.status, 200, JSON.stringify(reply.body))
      const agents = (reply.body as { readonly agents: ReadonlyArray<RegistryNode> }).agents
      if (ready(agents)) return agents
      yield* Effect.yieldNow()
    }
    return yield* Effect.dieMessage("the registry snapshot never showed what the test waits for")
  })

describe("inspector", () => {
  it.scoped("INS-01 the page and its modules are served with their content types; no request reaches a file outside the folder", () =>
    Effect.gen(function*() {
      const served = yield* serve(yield* fileStore, [])
      // /inspector redirects to the folder, relative so a prefix in front of the server is kept
      const bare = yield* rawGet(served.url, "/inspector")
      assert.strictEqual(bare.status, 302)
      const page = yield* Effect.promise(() => fetch(`${served.url}/inspector`))
      assert.strictEqual(page.status, 200)
      assert.strictEqual(page.url, `${served.url}/inspector/`)
      assert.strictEqual(page.headers.get("content-type"), "text/html; charset=utf-8")
      assert.include(page.headers.get("content-security-policy") ?? "", "script-src 'self'")
      const html = yield* Effect.promise(() => page.text())
      assert.include(html, `<script type="module" src="app.js"></script>`)
      const types: Record<string, string> = {
        "app.js": "text/javascript; charset=utf-8",
        "api.js": "text/javascript; charset=utf-8",
        "timeline.js": "text/javascript; charset=utf-8",
        "dom.js": "text/javascript; charset=utf-8",
        "charts.js": "text/javascript; charset=utf-8",
        "style.css": "text/css; charset=utf-8",
        "index.html": "text/html; charset=utf-8"
      }
      for (const [file, type] of Object.entries(types)) {
        const reply = yield* Effect.promise(() => fetch(`${served.url}/inspector/${file}`))
        assert.strictEqual(reply.status, 200, file)
        assert.strictEqual(reply.headers.get("content-type"), type, file)
        assert.strictEqual(reply.headers.get("x-content-type-options"), "nosniff", file)
        const body = yield* Effect.promise(() => reply.text())
        assert.strictEqual(body, fs.readFileSync(new URL(`../inspector/${file}`, import.meta.url), "utf8"), file)
      }
      // the modules are plain JavaScript checked by TypeScript (`// @ts-check`), nothing to build
      for (const file of ["app.js", "api.js", "timeline.js", "dom.js", "charts.js"]) {
        assert.match(fs.readFileSync(new URL(`../inspector/${file}`, import.meta.url), "utf8"), /^\/\/ @ts-check\n/, file)
      }
      // traversal: encoded and plain dot segments, other folders, other extensions, files that do not exist
      const secret = fs.readFileSync(new URL("../package.json", import.meta.url), "utf8")
      for (
        const attempt of [
          "/inspector/../package.json",
          "/inspector/..%2fpackage.json",
          "/inspector/%2e%2e%2fpackage.json",
          "/inspector/%2e%2e/package.json",
          "/inspector/..%2f..%2fpackage.json",
          "/inspector/..%5cpackage.json",
          "/inspector/.%2e/.%2e/package.json",
          "/inspector/%2fetc%2fpasswd",
          "/inspector/....%2f%2fpackage.json",
          "/inspector/tsconfig.json",
          "/inspector/missing.js",
          "/inspector/app.js%00.css",
          "/inspector/.htaccess"
        ]
      ) {
        const reply = yield* rawGet(served.url, attempt)
        assert.strictEqual(reply.status, 404, `${attempt}: ${reply.body}`)
        assert.notInclude(reply.body, "\"name\": \"effect-agent\"", attempt)
        assert.notStrictEqual(reply.body, secret, attempt)
      }
    }))

  it.scoped("INS-01 inspector: false serves neither the page nor the registry; the API is unchanged", () =>
    Effect.gen(function*() {
      const served = yield* serve(yield* fileStore, [], { http: { inspector: false } })
      assert.strictEqual((yield* rawGet(served.url, "/inspector/")).status, 404)
      assert.strictEqual((yield* rawGet(served.url, "/inspector/app.js")).status, 404)
      assert.strictEqual((yield* rawGet(served.url, "/inspector/api/registry")).status, 404)
      assert.strictEqual((yield* request(`${served.url}/sessions`)).status, 200)
    }))

  it.scoped("INS-01 GET /inspector/api/registry: live agents with their owners and initiators; the sessions routes' bearer authentication", () =>
    Effect.gen(function*() {
      const served = yield* serve(yield* fileStore, [], {
        http: {
          authenticate: (token) =>
            Effect.succeed(Redacted.value(token) === "letmein" ? Option.some({ id: "ops" }) : Option.none()),
          authorize: (principal, _id, action) => Effect.succeed(principal.id === "ops" || action !== "list")
        }
      })
      const anonymous = yield* request(`${served.url}/inspector/api/registry`)
      assert.strictEqual(anonymous.status, 401)
      assert.strictEqual((anonymous.body as { readonly type: string }).type, "effect-agent/Unauthorized")
      assert.strictEqual(anonymous.headers.get("www-authenticate"), "Bearer")
      const wrong = yield* request(`${served.url}/inspector/api/registry`, { headers: { authorization: "Bearer nope" } })
      assert.strictEqual(wrong.status, 401)
      // the page's files are public (they hold no data): only the data routes ask for the token
      assert.strictEqual((yield* rawGet(served.url, "/inspector/app.js")).status, 200)
      const asOps = { authorization: "Bearer letmein" }
      const empty = yield* request(`${served.url}/inspector/api/registry`, { headers: asOps })
      assert.deepStrictEqual(empty.body, { agents: [] })

      // a host-owned root and, created from its work, a child it owns (REG-07, INIT)
      const parent = yield* served.host.get("lead", { options: route })
      yield* served.registry.create({ sessionId: "helper", options: route, parentAgent: parent }).pipe(
        served.registry.withInitiator(parent)
      )
      yield* served.registry.create({ sessionId: "loner", options: route })
      const snapshot = (ready: (agents: ReadonlyArray<RegistryNode>) => boolean) => registryWhen(served, asOps, ready)
      const agents = yield* snapshot((list) => list.some((agent) => agent.initiator === "lead"))
      assert.deepStrictEqual(agents, [
        { id: "lead", status: "idle", owner: null, initiator: null },
        { id: "helper", status: "idle", owner: "lead", initiator: "lead" },
        { id: "loner", status: "idle", owner: null, initiator: null }
      ])
      // the service query behind it (REG-07, one snapshot)
      const owners = yield* served.registry.owners
      assert.deepStrictEqual(owners.map(({ agent, owner }) => [agent.id, Option.getOrNull(owner)]), [
        ["lead", null],
        ["helper", "lead"],
        ["loner", null]
      ])
      // an owner is one only while both are live: the passivated lead leaves its helper a root
      assert.isTrue(yield* served.host.passivate("lead"))
      const after = yield* snapshot((list) => !list.some((agent) => agent.id === "lead"))
      assert.deepStrictEqual(after, [
        { id: "helper", status: "idle", owner: null, initiator: "lead" },
        { id: "loner", status: "idle", owner: null, initiator: null }
      ])
    }))
})

// -------------------------------------------------------------------------------------------------
// INS-02: the page in a real browser

/** Chromium, closed with the Scope. */
const launchBrowser = Effect.acquireRelease(
  Effect.promise(() =>
    chromium.launch({
      executablePath: chromiumPath,
      headless: true,
      args: process.getuid?.() === 0 ? ["--no-sandbox"] : []
    })
  ),
  (browser: Browser) => Effect.promise(() => browser.close())
)

/** A page whose errors fail the test: an uncaught exception or a console error in the inspector is a defect. */
const openPage = (browser: Browser) =>
  Effect.gen(function*() {
    const context = yield* Effect.acquireRelease(
      Effect.promise(() => browser.newContext({ viewport: { width: 1400, height: 900 } })),
      (context) => Effect.promise(() => context.close())
    )
    const page = yield* Effect.promise(() => context.newPage())
    page.setDefaultTimeout(20_000)
    const errors: Array<string> = []
    page.on("pageerror", (error) => errors.push(`page error: ${error.message}`))
    page.on("response", (response) => {
      if (response.status() >= 400) errors.push(`${response.status()} from ${response.url()}`)
    })
    page.on("console", (message) => {
      if (message.type() === "error") errors.push(`console error: ${message.text()}`)
    })
    return { page, errors }
  })

const inPage = <A>(f: () => Promise<A>) => Effect.promise(f)

/** The text of the first element matching `selector`, once it contains `text`. */
const waitForText = (page: Page, selector: string, text: string) =>
  inPage(() => page.locator(selector, { hasText: text }).first().waitFor()).pipe(
    Effect.zipRight(inPage(() => page.locator(selector, { hasText: text }).first().innerText()))
  )

const screenshotDirectory = (fallback: string) => {
  const dir = process.env["EFFECT_AGENT_SCREENSHOT_DIR"] ?? fallback
  fs.mkdirSync(dir, { recursive: true })
  return dir
}

describe("inspector in Chromium", () => {
  it.scoped.skipIf(!hasChromium && !inCi)(
    "INS-02 headless Chromium: the timeline shows a tool call's arguments and a crash repair, a live delta while the turn streams, and a steer typed in the page reaches the log; SEC-06 the page polls the list without meta and shows a session's meta from its summary",
    () =>
      Effect.gen(function*() {
        if (!hasChromium) {
          return yield* Effect.dieMessage(
            `INS-02 needs Chromium at ${chromiumPath} under CI: .ci/run installs Debian's chromium package`
          )
        }
        const store = yield* fileStore
        const served = yield* serve(
          store,
          {
            seeded: [
              [
                Model.text("Let me look at the file."),
                Model.toolCall("call-1", "read_file", JSON.stringify({ path: "notes/todo.txt", lines: 3 }))
              ],
              Model.text("The file lists two tasks.")
            ],
            live: [Model.hang("Thinking it over")]
          },
          { host: { setup: (agent) => agent.tools.register(readFile) } }
        )
        // seeded sessions: one with a tool turn, a fork of it (lineage), one created empty
        const put = (id: string) => request(`${served.url}/sessions/${id}`, { method: "PUT", body: { options: route } })
        assert.strictEqual((yield* put("seeded")).status, 201)
        // SEC-06: a session whose meta the list never carries (the page reads it when it shows the session)
        const described = yield* request(`${served.url}/sessions/described`, {
          method: "PUT",
          body: { options: route, meta: { title: "Quarterly notes", notes: "n".repeat(20_000) } }
        })
        assert.strictEqual(described.status, 201)
        const sent = yield* request(`${served.url}/sessions/seeded/messages`, {
          method: "POST",
          body: { text: "What is in notes/todo.txt?" }
        })
        assert.strictEqual(sent.status, 202)
        yield* served.host.use("seeded", (agent) => agent.whenIdle)
        const fork = yield* request(`${served.url}/sessions/seeded/fork`, { method: "POST", body: { childId: "seeded-copy" } })
        assert.strictEqual(fork.status, 201, JSON.stringify(fork.body))
        assert.strictEqual((yield* put("live")).status, 201)
        // a log a crash left inside a turn (a tool call without its result), repaired when the host resumes it
        yield* Effect.scoped(Effect.flatMap(
          Context.get(store.context, SessionPersistence).create(header("crashed" as SessionId)),
          (writer) => writer.append(openTurn())
        )).pipe(Effect.orDie)
        yield* served.host.get("crashed")
        const repaired = yield* storedEvents(store, "crashed")
        assert.deepStrictEqual(repaired.at(-1)?.data, { turn: 1, reason: { kind: "interrupted" } })

        const browser = yield* launchBrowser
        const { errors, page } = yield* openPage(browser)
        // SEC-06: every list the page polls, as the server sent it
        const lists: Array<{ readonly url: string; readonly body: Promise<unknown> }> = []
        page.on("response", (response) => {
          if (new URL(response.url()).pathname === "/sessions") lists.push({ url: response.url(), body: response.json() })
        })
        yield* inPage(() => page.goto(`${served.url}/inspector`))

        // the sessions list: every seeded session, with status and usage
        yield* inPage(() => page.locator(`#sessions tr[data-session-id="seeded-copy"]`).waitFor())
        const seededRow = yield* inPage(() => page.locator(`#sessions tr[data-session-id="seeded"]`).innerText())
        assert.include(seededRow, "tokens")
        // the registry tree: the live agents of the host
        yield* inPage(() => page.locator(`#registry li[data-agent-id="seeded"]`).waitFor())

        // SEC-06: the list the page polls carries no meta; a session's meta shows once it is selected
        yield* inPage(() => page.locator(`#sessions tr[data-session-id="described"]`).click())
        const shownMeta = yield* waitForText(page, "#session-meta pre", "Quarterly notes")
        assert.include(shownMeta, "\"title\": \"Quarterly notes\"")
        assert.isAbove(lists.length, 0)
        for (const list of lists) {
          assert.notInclude(list.url, "include=meta")
          const entries = ((yield* inPage(() => list.body)) as { readonly sessions: ReadonlyArray<object> }).sessions
          assert.include(entries.map((entry) => (entry as { readonly id: string }).id), "described")
          for (const entry of entries) assert.notProperty(entry, "meta")
        }

        // the seeded session's timeline: the tool call with its arguments and its result
        yield* inPage(() => page.locator(`#sessions tr[data-session-id="seeded"]`).click())
        const args = yield* waitForText(page, `.tool-call[data-call-id="call-1"] .arguments`, "notes/todo.txt")
        assert.deepStrictEqual(JSON.parse(args), { path: "notes/todo.txt", lines: 3 })
        const result = yield* waitForText(page, `.tool-call[data-call-id="call-1"] .result`, "ship the inspector")
        assert.include(result, "notes/todo.txt: 3 lines")
        assert.include(yield* waitForText(page, ".turn .assistant", "two tasks"), "The file lists two tasks.")
        assert.include(yield* waitForText(page, ".turn.end-completed .turn-end", "completed"), "turn end: completed")

        // the repaired session: the closer result and the interrupted turn end are highlighted as repairs
        yield* inPage(() => page.locator(`#sessions tr[data-session-id="crashed"]`).click())
        const closer = yield* waitForText(page, `.tool-call[data-call-id="call-1"] .result.repair`, "TOOL_OUTCOME_UNKNOWN")
        assert.include(closer, "repair")
        yield* waitForText(page, ".turn.end-interrupted .turn-end.repair", "interrupted")
        const shots = screenshotDirectory(yield* tempDirectory("effect-agent-inspector-"))
        const repairShot = path.join(shots, "inspector-repair.png")
        yield* inPage(() => page.screenshot({ path: repairShot, fullPage: true }))
        yield* inPage(() => page.locator(`#sessions tr[data-session-id="seeded"]`).click())
        yield* waitForText(page, `.tool-call[data-call-id="call-1"] .arguments`, "notes/todo.txt")

        const seededShot = path.join(shots, "inspector-seeded.png")
        yield* inPage(() => page.screenshot({ path: seededShot, fullPage: true }))

        // a turn streams on "live": its text appears in the page before anything of it is durable
        yield* inPage(() => page.locator(`#sessions tr[data-session-id="live"]`).click())
        yield* inPage(() => page.locator("#stream-state.open").waitFor())
        yield* inPage(() => page.fill("#message", "Start working"))
        yield* inPage(() => page.click("#send"))
        const delta = yield* waitForText(page, ".live-delta .text", "Thinking it over")
        assert.strictEqual(delta, "Thinking it over")
        const whileStreaming = yield* storedEvents(store, "live")
        assert.isFalse(whileStreaming.some((event) => event.type === "assistant/message"))

        // a steer typed in the page: durable in the session's inbox (next step, waking)
        yield* inPage(() => page.fill("#message", "Also check the calendar"))
        yield* inPage(() => page.selectOption("#mode", "steer"))
        yield* inPage(() => page.click("#send"))
        yield* waitForText(page, "#notice", "sent steer")
        const steered = (yield* storedEvents(store, "live")).filter((event): event is Extract<SessionEvent, { type: "agent/inbox/spliced" }> =>
          event.type === "agent/inbox/spliced" &&
          (event.data as { readonly inserted: ReadonlyArray<unknown> }).inserted.length > 0
        )
        const steer = steered.find((event) => event.data.inserted.some((message) => textOf(message.content) === "Also check the calendar"))
        assert.isDefined(steer)
        assert.strictEqual(steer!.data.target, "next-step")
        assert.notStrictEqual(steer!.data.wake, false)
        // and the page shows it from the event stream
        yield* waitForText(page, ".splice .text", "Also check the calendar")

        // cancel from the page: the turn ends aborted by the user; the text streamed so far is now durable
        // (an interrupted assistant message), which replaces the live one
        yield* inPage(() => page.click("#cancel"))
        yield* waitForText(page, ".turn.end-aborted .turn-end", "aborted")
        assert.include(yield* waitForText(page, ".assistant.interrupted", "Thinking it over"), "interrupted")
        assert.strictEqual(yield* inPage(() => page.locator(".live-delta").count()), 0)
        const ended = (yield* storedEvents(store, "live")).find((event) => event.type === "turn/end")
        assert.deepStrictEqual(ended?.data, { turn: 1, reason: { kind: "aborted", cause: { kind: "user" } } })

        const liveShot = path.join(shots, "inspector-live.png")
        yield* inPage(() => page.screenshot({ path: liveShot, fullPage: true }))
        assert.isAbove(fs.statSync(seededShot).size, 10_000)
        assert.isAbove(fs.statSync(liveShot).size, 10_000)
        assert.isAbove(fs.statSync(repairShot).size, 10_000)
        // eslint-disable-next-line no-console
        console.info(`INS-02 screenshots: ${seededShot} ${repairShot} ${liveShot}`)
        assert.deepStrictEqual(errors, [])
      }),
    120_000
  )
})


// -------------------------------------------------------------------------------------------------
// DOC-03: an inspector that helps (follows the stream, narrow screens, plain labels, controls that
// say when they cannot act, per-turn time bars and token usage)

/**
 * The seeded server of the DOC-03 tests: each session has its own script. The TestClock starts at a
 * plausible date; the "tools" session's `run_tests` call takes 1.4 s of it (held by a gate while
 * the test moves the clock), so its time bar has spans of different lengths.
 */
const docServer = Effect.gen(function*() {
  yield* TestClock.setTime(Date.UTC(2026, 11, 2, 9, 30, 0))
  const store = yield* fileStore
  const testsStarted = yield* Deferred.make<void>()
  const testsDone = yield* Deferred.make<void>()
  const runTests = Tool.make({
    name: "run_tests",
    description: "Runs the test suite.",
    parameters: Schema.Struct({ suite: Schema.String }),
    run: ({ suite }) =>
      Deferred.succeed(testsStarted, undefined).pipe(
        Effect.zipRight(Deferred.await(testsDone)),
        Effect.as(Tool.text(`${suite}: 12 passed`))
      )
  })
  const served = yield* serve(
    store,
    {
      // one turn: a reply with two tool calls (step 1), then a text reply (step 2)
      tools: [
        [
          Model.text("Let me look at the file and run the tests."),
          Model.toolCall("call-1", "read_file", JSON.stringify({ path: "notes/a-rather-long-folder-name/todo.txt", lines: 3 })),
          Model.toolCall("call-2", "run_tests", JSON.stringify({ suite: "inspector" }))
        ],
        Model.text("The file lists two tasks, and the tests pass.")
      ],
      // six short turns, then a reply that streams until canceled
      long: [
        ...Array.from({ length: 6 }, (_, index) => Model.text(`Reply number ${index + 1}, a sentence long enough to wrap.`)),
        Model.hang("Streaming the seventh reply")
      ],
      live: [Model.hang("Thinking it over")]
    },
    { host: { setup: (agent) => Effect.zipRight(agent.tools.register(readFile), agent.tools.register(runTests)) } }
  )
  const put = (id: string) => request(`${served.url}/sessions/${id}`, { method: "PUT", body: { options: route } })
  const say = (id: string, text: string, mode = "followup") =>
    request(`${served.url}/sessions/${id}/messages`, { method: "POST", body: { text, mode } })
  for (const id of ["tools", "long", "live", "idle"]) assert.strictEqual((yield* put(id)).status, 201)
  assert.strictEqual((yield* say("tools", "What is in notes/todo.txt, and do the tests pass?")).status, 202)
  yield* Deferred.await(testsStarted)
  yield* TestClock.adjust("1400 millis")
  yield* Deferred.succeed(testsDone, undefined)
  yield* served.host.use("tools", (agent) => agent.whenIdle)
  for (let turn = 1; turn <= 6; turn++) {
    assert.strictEqual((yield* say("long", `Question ${turn}`)).status, 202)
    yield* served.host.use("long", (agent) => agent.whenIdle)
  }
  // a reply still streaming when the test ends is canceled before the server stops
  yield* Effect.addFinalizer(() =>
    Effect.forEach(["long", "live"], (id) => request(`${served.url}/sessions/${id}/cancel`, { method: "POST", body: {} }), { discard: true })
  )
  return { store, served, say }
})

/** A page of `width` × `height` in a fresh Chromium context, with the inspector open on `session`. */
const openInspector = (browser: Browser, url: string, session: string, width: number, height: number) =>
  Effect.gen(function*() {
    const context = yield* Effect.acquireRelease(
      Effect.promise(() => browser.newContext({ viewport: { width, height } })),
      (context) => Effect.promise(() => context.close())
    )
    const page = yield* Effect.promise(() => context.newPage())
    page.setDefaultTimeout(20_000)
    const errors: Array<string> = []
    page.on("pageerror", (error) => errors.push(`page error: ${error.message}`))
    page.on("console", (message) => {
      if (message.type() === "error") errors.push(`console error: ${message.text()}`)
    })
    yield* inPage(() => page.goto(`${url}/inspector/#${session}`))
    yield* inPage(() => page.locator("#stream-state.open").waitFor())
    return { page, errors }
  })

/** In the page: whether the end of the timeline is in the window (what the follower keeps in view). */
const endInView = `document.getElementById("timeline").getBoundingClientRect().bottom <= window.innerHeight + 48`

/** A number the page computes from `expression` (page code is given as text: the tests have no DOM types). */
const pageNumber = (page: Page, expression: string) =>
  inPage(() => page.evaluate(expression)).pipe(Effect.map((value) => {
    assert.isNumber(value, expression)
    return value as number
  }))

/** Whether the end of the timeline is in the window. */
const timelineEndInView = (page: Page) => inPage(() => page.evaluate(endInView)).pipe(Effect.map((value) => value === true))

/** Waits until the end of the timeline is in the window. */
const waitTimelineEndInView = (page: Page) => inPage(() => page.waitForFunction(endInView, undefined, { timeout: 20_000 }))

const isAssistant = (event: SessionEvent): event is Extract<SessionEvent, { type: "assistant/message" }> =>
  event.type === "assistant/message"

const needsChromium = Effect.suspend(() =>
  hasChromium
    ? Effect.void
    : Effect.dieMessage(`DOC-03 needs Chromium at ${chromiumPath} under CI: .ci/run installs Debian's chromium package`)
)

describe("inspector DOC-03 in Chromium", () => {
  it.scoped.skipIf(!hasChromium && !inCi)(
    "DOC-03 labels say what an entry is (a step start is not a model request) and a scripted turn has an SVG time bar per step, model request and tool call, and a token-usage chart",
    () =>
      Effect.gen(function*() {
        yield* needsChromium
        const { served, store } = yield* docServer
        const browser = yield* launchBrowser
        const { errors, page } = yield* openInspector(browser, served.url, "tools", 1400, 900)
        yield* waitForText(page, ".turn.end-completed .turn-end", "completed")

        // every durable entry is named in words, with its event type as the tooltip
        const labels = yield* inPage(() =>
          page.$$eval("#timeline [data-type]", (elements) =>
            elements.map((element) => ({
              type: element.getAttribute("data-type") ?? "",
              title: element.querySelector(":scope > .stamp")?.getAttribute("title") ?? "",
              label: element.querySelector(":scope > .stamp b")?.textContent ?? ""
            })))
        )
        const stored = yield* storedEvents(store, "tools")
        // a turn's start is its heading, a step's end closes its frame: every other event has an entry
        assert.include(yield* inPage(() => page.locator(`.turn[data-turn="1"] h3`).innerText()), "Turn 1 started")
        assert.deepStrictEqual(
          labels.map((entry) => entry.type).sort(),
          stored.map((event) => event.type).filter((type) => type !== "turn/start" && type !== "step/end").sort(),
          "one labelled entry per durable event"
        )
        const labelOf = (type: string) => labels.filter((entry) => entry.type === type).map((entry) => entry.label)
        assert.deepStrictEqual(labelOf("step/start"), ["step 1 started", "step 2 started"])
        assert.deepStrictEqual(labelOf("assistant/message"), ["model reply (scripted/test)", "model reply (scripted/test)"])
        assert.deepStrictEqual(labelOf("tool/call"), ["tool call read_file", "tool call run_tests"])
        assert.deepStrictEqual(labelOf("tool/result"), ["tool result", "tool result"])
        assert.deepStrictEqual(labelOf("user/message"), ["message from user"])
        assert.deepStrictEqual(labelOf("turn/end"), ["turn end: completed"])
        assert.include(labelOf("agent/inbox/spliced"), "follow-up queued for the next turn")
        for (const entry of labels) {
          assert.strictEqual(entry.title, entry.type)
          assert.notInclude(entry.label.replace("scripted/test", ""), "/", `${entry.type} is named in words: ${entry.label}`)
          if (entry.type !== "assistant/message") assert.notInclude(entry.label, "model request", entry.type)
        }

        // the turn's time bar: 2 steps, 2 model requests, 2 tool calls, in that order, on the turn's axis
        const turn = page.locator(`.turn[data-turn="1"]`)
        const bars = yield* inPage(() =>
          turn.locator("svg.time-bars rect.bar").evaluateAll((rects) =>
            rects.map((rect) => ({
              kind: rect.getAttribute("data-kind"),
              x: parseFloat(rect.getAttribute("x") ?? "NaN"),
              width: parseFloat(rect.getAttribute("width") ?? "NaN"),
              open: rect.classList.contains("open")
            })))
        )
        assert.deepStrictEqual(bars.map((bar) => bar.kind), ["step", "model", "tool", "tool", "step", "model"])
        for (const bar of bars) {
          assert.isFalse(bar.open, "a completed turn has no open span")
          assert.isAtLeast(bar.x, 34)
          assert.isAtMost(bar.x + bar.width, 98.7)
        }
        // the 1.4 s the tests took is most of the turn: step 1 and run_tests span it, the rest is instant
        const [step1, model1, readCall, testsCall, step2] = bars
        assert.isAbove(step1!.width, 60)
        assert.isAbove(testsCall!.width, 60)
        assert.isBelow(model1!.width, 1)
        assert.isBelow(readCall!.width, 1)
        assert.isAbove(step2!.x, 97)
        assert.include(yield* inPage(() => turn.locator("svg.time-bars > text").nth(1).textContent()), "1.40 s")
        // the usage chart: one row per model reply, input and output stacked, totals from the log
        const rows = yield* inPage(() => turn.locator("svg.usage-chart g.usage-row").count())
        assert.strictEqual(rows, 2)
        assert.strictEqual(yield* inPage(() => turn.locator("svg.usage-chart g.usage-row rect").count()), 4)
        const usage = stored.flatMap((event) =>
          isAssistant(event) && event.data.usage !== undefined ? [event.data.usage] : []
        )
        const total = (key: "inputTokens" | "outputTokens") => usage.reduce((sum, item) => sum + (item[key] ?? 0), 0)
        assert.isAbove(total("outputTokens"), 0)
        const heading = yield* inPage(() => turn.locator("svg.usage-chart > text").first().textContent())
        assert.strictEqual(heading, `tokens: ${total("inputTokens")} in · ${total("outputTokens")} out`)

        const shots = screenshotDirectory(yield* tempDirectory("effect-agent-inspector-"))
        const shot = path.join(shots, "inspector-charts.png")
        yield* inPage(() => page.screenshot({ path: shot, fullPage: true }))
        assert.isAbove(fs.statSync(shot).size, 10_000)
        // eslint-disable-next-line no-console
        console.info(`DOC-03 screenshot: ${shot}`)
        assert.deepStrictEqual(errors, [])
      }),
    120_000
  )

  it.scoped.skipIf(!hasChromium && !inCi)(
    "DOC-03 usable at 420 px: one column, no horizontal scroll (document.scrollWidth <= 420), every control within the screen",
    () =>
      Effect.gen(function*() {
        yield* needsChromium
        const { served } = yield* docServer
        const browser = yield* launchBrowser
        const { errors, page } = yield* openInspector(browser, served.url, "tools", 420, 800)
        yield* waitForText(page, ".turn.end-completed .turn-end", "completed")
        yield* inPage(() => page.locator(`#sessions tr[data-session-id="long"]`).waitFor())
        yield* inPage(() => page.locator("svg.time-bars").waitFor())
        const scrollWidth = yield* pageNumber(page, "document.documentElement.scrollWidth")
        assert.isAtMost(scrollWidth, 420)
        for (const control of ["#message", "#mode", "#send", "#cancel", "#keep-inbox", "#create-id", "#create", "svg.time-bars"]) {
          const box = yield* inPage(() => page.locator(control).first().boundingBox())
          assert.isNotNull(box, control)
          assert.isAtLeast(box!.x, 0, control)
          assert.isAtMost(box!.x + box!.width, 420, control)
        }
        // and typing and sending works from there
        yield* inPage(() => page.fill("#message", "Thanks"))
        yield* inPage(() => page.locator("#send:enabled").waitFor())
        const shots = screenshotDirectory(yield* tempDirectory("effect-agent-inspector-"))
        const shot = path.join(shots, "inspector-420.png")
        yield* inPage(() => page.screenshot({ path: shot, fullPage: true }))
        assert.isAbove(fs.statSync(shot).size, 10_000)
        assert.deepStrictEqual(errors, [])
      }),
    120_000
  )

  it.scoped.skipIf(!hasChromium && !inCi)(
    "DOC-03 controls are disabled when they cannot act: Cancel turn on an idle session, Send without a message, Create without an id; Cancel is enabled while a turn runs",
    () =>
      Effect.gen(function*() {
        yield* needsChromium
        const { served } = yield* docServer
        const browser = yield* launchBrowser
        const { errors, page } = yield* openInspector(browser, served.url, "idle", 1400, 900)
        yield* waitForText(page, "#session-summary", "idle")
        assert.isTrue(yield* inPage(() => page.locator("#cancel").isDisabled()))
        assert.isTrue(yield* inPage(() => page.locator("#keep-inbox").isDisabled()))
        assert.include(yield* inPage(() => page.locator("#cancel").getAttribute("title")), "nothing to cancel")
        assert.isTrue(yield* inPage(() => page.locator("#send").isDisabled()))
        assert.isTrue(yield* inPage(() => page.locator("#create").isDisabled()))
        yield* inPage(() => page.fill("#message", "   "))
        assert.isTrue(yield* inPage(() => page.locator("#send").isDisabled()), "blank text is no message")
        yield* inPage(() => page.fill("#create-id", "fresh"))
        yield* inPage(() => page.locator("#create:enabled").waitFor())

        // a running turn can be canceled; once it ended, it cannot
        yield* inPage(() => page.locator(`#sessions tr[data-session-id="live"]`).click())
        yield* inPage(() => page.locator("#stream-state.open").waitFor())
        assert.isTrue(yield* inPage(() => page.locator("#cancel").isDisabled()))
        yield* inPage(() => page.fill("#message", "Start working"))
        yield* inPage(() => page.click("#send"))
        yield* waitForText(page, ".live-delta .text", "Thinking it over")
        yield* inPage(() => page.locator("#cancel:enabled").waitFor())
        assert.isTrue(yield* inPage(() => page.locator("#send").isDisabled()), "the sent message was cleared")
        yield* inPage(() => page.click("#cancel"))
        yield* waitForText(page, ".turn.end-aborted .turn-end", "aborted")
        yield* inPage(() => page.locator("#cancel:disabled").waitFor())
        assert.deepStrictEqual(errors, [])
      }),
    120_000
  )

  it.scoped.skipIf(!hasChromium && !inCi)(
    "DOC-03 follows the live stream: scrolls to a streaming reply, stays where the reader scrolled away, follows again from the newest-entries button",
    () =>
      Effect.gen(function*() {
        yield* needsChromium
        const { say, served } = yield* docServer
        const browser = yield* launchBrowser
        const { errors, page } = yield* openInspector(browser, served.url, "long", 420, 700)
        yield* inPage(() => page.locator(`.turn[data-turn="6"].end-completed`).waitFor())
        // the page is taller than the window, and it opened at the newest entry
        const height = yield* pageNumber(page, "document.documentElement.scrollHeight")
        assert.isAbove(height, 2 * 700)
        yield* waitTimelineEndInView(page)

        // a reply streams: the page scrolls to it (sending from the page follows the stream again,
        // though clicking Send scrolled the page up to the controls)
        yield* inPage(() => page.fill("#message", "One more"))
        yield* inPage(() => page.click("#send"))
        yield* waitForText(page, ".live-delta .text", "Streaming the seventh reply")
        yield* waitTimelineEndInView(page)
        const delta = yield* inPage(() => page.locator(".live-delta").boundingBox())
        assert.isNotNull(delta)
        assert.isAtLeast(delta!.y, 0)
        assert.isAtMost(delta!.y + delta!.height, 700)
        // the running turn's time bar: its step and its model request still open (hatched)
        const open = yield* inPage(() =>
          page.locator(`.turn[data-turn="7"] svg.time-bars rect.bar.open`).evaluateAll((rects) =>
            rects.map((rect) => rect.getAttribute("data-kind"))
          )
        )
        assert.deepStrictEqual(open, ["step", "model"])

        // the reader scrolls up: new entries do not pull the page down
        yield* inPage(() => page.evaluate("window.scrollTo(0, 0)"))
        yield* inPage(() => page.locator("#follow-newest").waitFor({ state: "visible" }))
        assert.strictEqual((yield* say("long", "Read it twice", "steer")).status, 202)
        yield* inPage(() => page.locator(".splice .text", { hasText: "Read it twice" }).waitFor({ state: "attached" }))
        assert.strictEqual(yield* pageNumber(page, "window.scrollY"), 0)
        assert.isFalse(yield* timelineEndInView(page))

        // the newest-entries button follows again, and so do later entries
        yield* inPage(() => page.click("#follow-newest"))
        yield* waitTimelineEndInView(page)
        yield* inPage(() => page.locator("#follow-newest").waitFor({ state: "hidden" }))
        assert.strictEqual((yield* say("long", "And summarise", "steer")).status, 202)
        yield* inPage(() => page.locator(".splice .text", { hasText: "And summarise" }).waitFor())
        yield* waitTimelineEndInView(page)
        assert.deepStrictEqual(errors, [])
      }),
    120_000
  )
})

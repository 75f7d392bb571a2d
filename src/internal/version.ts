/**
 * The library's version, in one place (DOC-02): the CLI's `--version` and the OpenAPI document's
 * `info.version` read it, and a test holds `package.json`, its lock file and the README to it.
 *
 * @internal
 */

/** @internal */
export const VERSION = "0.3.0"

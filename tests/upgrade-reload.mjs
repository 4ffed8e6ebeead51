// An upgrade is what the next load runs: the server serves a copy of www/ (its package too)
// whose files last changed ten days ago, as a deployment that has been up a while; the page
// loads, the files are replaced as an upgrade replaces them, and a reload (or a new tab of the
// same browser) runs the new ones. Files sent with Last-Modified alone are fresh to Chromium for
// a tenth of their age (a day here): its reload then asks again for the page itself but runs
// the old app.js and SDK from its cache, and a new tab runs the old page, app.js and SDK.
// The last line printed is "N passed, N failed".
import { cpSync, readFileSync, readdirSync, renameSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { WWW, Server, until, assertEq, openPage, runScenarios } from "./support.mjs";

/** The real server on a copy of www/ that the scenario may change (www/ itself stays as it is). */
class CopiedWwwServer extends Server {
  constructor(flags = []) {
    super(flags);
    this.www = join(this.dir, "www");
    cpSync(WWW, this.www, { recursive: true });
    const tenDaysAgo = new Date(Date.now() - 10 * 24 * 3600 * 1000);
    for (const file of files(this.www)) utimesSync(file, tenDaysAgo, tenDaysAgo);
  }
  /** Replaces a file of the copy as a deployment does: the new bytes written aside, renamed in. */
  upgrade(path, change) {
    const file = join(this.www, path);
    writeFileSync(`${file}.next`, change(readFileSync(file, "utf8")));
    renameSync(`${file}.next`, file);
  }
}

function files(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? files(path) : [path];
  });
}

/** Version 2 of the page, its script and the SDK: each leaves a mark the test reads. */
function upgradeAll(server) {
  server.upgrade("index.html", (html) => html.replace("<head>", '<head>\n  <meta name="upgrade" content="page v2">'));
  server.upgrade("app.js", (js) => `${js}\nglobalThis.upgradedApp = "app v2";\n`);
  server.upgrade("pkg/turnstream.js", (js) => `${js}\nglobalThis.upgradedSdk = "sdk v2";\n`);
}

const marks = (page) => page.evaluate(() => ({
  page: document.querySelector("meta[name=upgrade]")?.content ?? null,
  app: globalThis.upgradedApp ?? null,
  sdk: globalThis.upgradedSdk ?? null,
}));

const scenarios = [];
// The runner's own server serves the checkout's www/, which must not change: each scenario
// starts one on a copy.
const scenario = (name, fn) => scenarios.push({
  name, flags: [], fn: async ({ context, session }) => {
    const server = await new CopiedWwwServer().start();
    try {
      return await fn({ context, server, session });
    } finally {
      await server.stop();
    }
  },
});

scenario("a reload after an upgrade runs the new page, app.js and SDK", async ({ context, server, session }) => {
  const page = await openPage(context, server, session);
  assertEq(await marks(page), { page: null, app: null, sdk: null }, "version 1 before the upgrade");
  upgradeAll(server);
  await page.reload();
  await until("the page to be live after the reload", async () => (await page.textContent("[data-testid=connection]")) === "live");
  assertEq(await marks(page), { page: "page v2", app: "app v2", sdk: "sdk v2" }, "the reload runs version 2");
  return page;
});

// A navigation that forces no revalidation, unlike reload (which revalidates the page itself).
scenario("a new tab of the same browser after an upgrade runs the new page, app.js and SDK", async ({ context, server, session }) => {
  const first = await openPage(context, server, session);
  upgradeAll(server);
  const page = await openPage(context, server, session);
  assertEq(await marks(page), { page: "page v2", app: "app v2", sdk: "sdk v2" }, "the new tab runs version 2");
  await first.close();
  return page;
});

await runScenarios("upgrade-reload", scenarios);

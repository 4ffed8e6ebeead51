// A reload never shows less: the cache is written when the page is hidden or leaves, so a page
// reloaded mid-turn shows, before any network answer, at least the text that was on screen.
// The last line printed is "N passed, N failed".
import { until, assert, view, assistants, openPage, send, runScenarios } from "./support.mjs";

const scenarios = [];
const scenario = (name, flags, fn) => scenarios.push({ name, flags, fn });

scenario("a reload mid-turn shows, before any network answer, at least the text on screen before it",
  ["--demo-delay-ms", "15", "--coalesce-ms", "0"], async ({ context, server, session }) => {
    const page = await openPage(context, server, session);
    await send(page, "/deltas 2000");
    for (const at of [200, 600, 1200]) {
      await until(`the reply to pass ${at} characters`, async () => (assistants(await view(page))[0]?.text.length ?? 0) > at);
      const before = assistants(await view(page))[0].text;
      // From here on the reloaded page hears nothing from the server: it shows the cache alone.
      await page.route("**/api/**", () => {});
      await page.reload();
      const after = await until("the cached reply to show", async () => assistants(await view(page))[0]);
      assert(after.text.length >= before.length && after.text.startsWith(before),
        `after the reload the reply shows ${after.text.length} characters, before it ${before.length}`);
      await page.unroute("**/api/**");
      await page.reload();
      await until("live again", async () => (await view(page)).connection === "live");
    }
    return page;
  });

runScenarios("reload-cache", scenarios).catch((e) => {
  console.error(e);
  console.log("0 passed, 1 failed");
  process.exit(1);
});

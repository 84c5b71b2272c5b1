// Entry point: sign-in, who-am-I, the cluster panel and hash routing
// (#/ → jobs, #/jobs/<id> → job page, #/cluster → who holds what and the queue's ETAs,
// #/sweeps → sweeps, #/sweeps/<id> → a sweep's trials and objective plots, #/webhooks →
// endpoints and deliveries with re-send). Each view returns a function that stops its timers.

import { ApiError, get, token } from "./api.js";
import { clusterView } from "./cluster.js";
import { jobView } from "./job.js";
import { jobsView, renderCluster } from "./jobs.js";
import { sweepsView, sweepView } from "./sweeps.js";
import { h } from "./util.js";
import { webhooksView } from "./webhooks.js";

const $ = (id) => document.getElementById(id);
const ctx = { me: null, onError };
let stopView = null;
let clusterTimer = null;

function onError(e, where) {
  if (e instanceof ApiError && e.status === 401) {
    signOut("Your token was rejected (401). Sign in again.");
    return;
  }
  if (where) where.textContent = `Error: ${e.message}`;
  console.error(e);
}

function showSignIn(message = "") {
  if (stopView) stopView();
  clearInterval(clusterTimer);
  $("app").hidden = true;
  $("signin").hidden = false;
  $("signout").hidden = true;
  $("who").textContent = "";
  $("signin-error").textContent = message;
  $("token-input").focus();
}

function signOut(message = "") {
  token.clear();
  ctx.me = null;
  showSignIn(message);
}

async function start() {
  if (!token.get()) return showSignIn();
  try {
    ctx.me = await get("/v1/whoami");
  } catch (e) {
    if (e instanceof ApiError && (e.status === 401 || e.status === 403)) {
      return signOut("That token was not accepted.");
    }
    return showSignIn(`Cannot reach the API: ${e.message}`);
  }
  $("signin").hidden = true;
  $("app").hidden = false;
  $("signout").hidden = false;
  $("who").replaceChildren(
    h("span", { id: "who-team" }, ctx.me.team || "all teams"), " · ",
    h("span", { id: "who-role" }, ctx.me.role),
    ctx.me.name ? ` · ${ctx.me.name}` : "");
  const cluster = () => renderCluster($("cluster")).catch((e) => onError(e, $("cluster")));
  cluster();
  clearInterval(clusterTimer);
  clusterTimer = setInterval(() => { if (!document.hidden) cluster(); }, 5000);  // not while hidden
  route();
}

function route() {
  if (!ctx.me) return;
  if (stopView) stopView();
  const main = $("main");
  if (window.location.hash.startsWith("#/cluster")) {
    stopView = clusterView(main, ctx);
    document.title = "Cluster · Shunter";
    return;
  }
  if (window.location.hash.startsWith("#/webhooks")) {
    stopView = webhooksView(main, ctx);
    document.title = "Webhooks · Shunter";
    return;
  }
  const sw = window.location.hash.match(/^#\/sweeps(?:\/([^/?#]+))?/);
  if (sw) {
    stopView = sw[1] ? sweepView(main, ctx, decodeURIComponent(sw[1])) : sweepsView(main, ctx);
    document.title = sw[1] ? `Sweep ${sw[1]} · Shunter` : "Sweeps · Shunter";
    return;
  }
  const m = window.location.hash.match(/^#\/jobs\/([^/?#]+)/);
  stopView = m ? jobView(main, ctx, decodeURIComponent(m[1])) : jobsView(main, ctx);
  document.title = m ? `Job ${m[1]} · Shunter` : "Jobs · Shunter";
}

$("signin-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const t = $("token-input").value.trim();
  if (!t) return;
  token.set(t);
  $("token-input").value = "";
  start();
});
$("signout").addEventListener("click", () => signOut());
window.addEventListener("hashchange", route);
start();

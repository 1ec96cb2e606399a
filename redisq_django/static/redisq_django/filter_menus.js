/*
 * The dead-letter list's filters as a bar of menus above the list, so the list has the
 * page's width (phones keep Django's filters under the list; the media query of
 * deadletter/change_list.html): every menu closed when the page opens, one open at a time, closed by a click
 * elsewhere or Escape. What Django's filters.js remembers of the column's open filters
 * (sessionStorage) is left as it was: opening a menu is not opening a filter there.
 */
"use strict";
{
    const panel = document.getElementById("changelist-filter");
    const bar = window.matchMedia("(min-width: 768px)");
    const KEY = "django.admin.filtersState";
    if (panel) {
        const menus = [...panel.querySelectorAll("details")];
        let kept = sessionStorage.getItem(KEY);
        const closeAll = (except) => menus.forEach((d) => { if (d !== except) { d.open = false; } });
        const layOut = () => {
            panel.classList.toggle("redisq-menus", bar.matches);
            if (bar.matches) {
                closeAll(null);
            } else {
                const state = JSON.parse(kept || "{}");
                menus.forEach((d) => { d.open = state[d.dataset.filterTitle] !== false; });
            }
        };
        // Registered after filters.js's (this script is deferred after it): it has
        // saved the toggle; in the bar, put back what it held.
        menus.forEach((d) => d.addEventListener("toggle", () => {
            if (!bar.matches) {
                kept = sessionStorage.getItem(KEY);
                return;
            }
            if (kept === null) { sessionStorage.removeItem(KEY); } else { sessionStorage.setItem(KEY, kept); }
            if (d.open) { closeAll(d); }
        }));
        document.addEventListener("click", (event) => {
            if (bar.matches && !event.target.closest("#changelist-filter details")) { closeAll(null); }
        });
        document.addEventListener("keydown", (event) => {
            if (bar.matches && event.key === "Escape") { closeAll(null); }
        });
        bar.addEventListener("change", layOut);
        layOut();
    }
}

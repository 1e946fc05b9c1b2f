#include "report/html_style.h"

#include <algorithm>

namespace gpueval::html {

const char* const kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:#1d2433;margin:24px auto;max-width:1200px;padding:0 16px}
h1{font-size:22px;margin:0 0 12px}h2{font-size:17px;margin:28px 0 8px}
code,.mono{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12px}
table{border-collapse:collapse}th,td{padding:3px 8px;border-bottom:1px solid #e3e6ec;vertical-align:top}
th{text-align:left;background:#f4f6f9;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
table.meta td:first-child{color:#5b6475;white-space:nowrap}table.meta td{word-break:break-all}
tr.group td{background:#fff4e5;font-weight:600}td[rowspan]{border-bottom:1px solid #c9ced8}.name{display:block;color:#7a8295;font-size:11px;font-weight:normal}
.warn{border:1px solid #d9822b;background:#fff6ea;border-left:6px solid #d9822b;padding:8px 14px;margin:16px 0}
.warn h2{margin:4px 0;color:#a3520b}.warn li{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12px}
details{margin:8px 0}summary{cursor:pointer;color:#5b6475}.chart{overflow-x:auto}.note{color:#5b6475;font-size:13px}
.legend span{display:inline-block;width:12px;height:12px;vertical-align:-1px;margin:0 4px 0 12px}
svg text{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12px;fill:#1d2433}
svg .axis{fill:#5b6475;font-size:11px}svg .grid{stroke:#e3e6ec}svg .err{stroke:#1d2433;stroke-width:1.2;fill:none}
svg .bar{fill:#4c78a8}svg .bar.group{fill:#e8871e}svg text.group{font-weight:bold}
)";

size_t code_points(const std::string& s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

}  // namespace gpueval::html

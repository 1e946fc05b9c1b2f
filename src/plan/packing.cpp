#include "plan/packing.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>

#include "gpueval/error.h"
#include "gpueval/packed_segments.h"

namespace gpueval {
namespace {

bool has_targets(const WorkItem& item) { return item.first_target < static_cast<int64_t>(item.tokens.size()); }

// Inputs an item adds after its group's trunk of `trunk` tokens: the rest of its context (a
// family member's own part) and every target but the last.
int64_t branch_inputs(const WorkItem& item, size_t trunk) {
  return std::max<int64_t>(static_cast<int64_t>(item.tokens.size()) - 1 - static_cast<int64_t>(trunk), 0);
}
int64_t branch_inputs(const WorkItem& item) { return branch_inputs(item, static_cast<size_t>(item.first_target)); }

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t limit = std::min(a.size(), b.size());
  size_t n = 0;
  while (n < limit && a[n] == b[n]) ++n;
  return n;
}

std::vector<int32_t> context_of(const WorkItem& item) {
  return {item.tokens.begin(), item.tokens.begin() + item.first_target};
}

}  // namespace

std::vector<ContextGroup> group_by_context(const std::vector<WorkItem>& items, bool share) {
  std::vector<ContextGroup> groups;
  // context -> the group its next item may join, and the branch inputs that group already holds
  std::map<std::vector<int32_t>, std::pair<size_t, int64_t>> open;
  std::map<int64_t, size_t> families;  // family -> its group
  for (size_t i = 0; i < items.size(); ++i) {
    std::vector<int32_t> context = context_of(items[i]);
    if (share && items[i].family >= 0) {
      // A family (one document's contexts that share a continuation) is one group whatever its
      // size; its trunk is the longest prefix every member's context starts with.
      const auto it = families.find(items[i].family);
      if (it != families.end()) {
        ContextGroup& g = groups[it->second];
        const size_t trunk = common_prefix(g.context, context);
        if (trunk > 0) {
          g.context.resize(trunk);
          g.items.push_back(i);
          continue;
        }
      }
      families[items[i].family] = groups.size();
      groups.push_back({std::move(context), {i}});
      continue;
    }
    const int64_t inputs = branch_inputs(items[i]);
    if (share) {
      auto it = open.find(context);
      const int64_t room = std::max<int64_t>(static_cast<int64_t>(context.size()), kMinBranchRoom);
      if (it != open.end() && it->second.second + inputs <= room) {
        groups[it->second.first].items.push_back(i);
        it->second.second += inputs;
        continue;
      }
      open[context] = {groups.size(), inputs};
    }
    groups.push_back({std::move(context), {i}});
  }
  return groups;
}

int64_t row_cost(const ContextGroup& group, const std::vector<WorkItem>& items, size_t prefix_length) {
  int64_t cost = 0;
  bool any_target = false;
  for (size_t i : group.items) {
    any_target = any_target || has_targets(items[i]);
    cost += branch_inputs(items[i], group.context.size());
  }
  if (any_target) cost += static_cast<int64_t>(group.context.size()) - static_cast<int64_t>(prefix_length);
  return cost;
}

std::vector<PrefixCluster> find_shared_prefixes(const std::vector<ContextGroup>& groups, size_t min_prefix) {
  std::vector<size_t> order(groups.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& x = groups[a].context;
    const auto& y = groups[b].context;
    if (x != y) return std::lexicographical_compare(x.begin(), x.end(), y.begin(), y.end());
    return a < b;
  });
  // Longest common prefix of two contexts, leaving each at least one token of its own.
  auto shared = [&](size_t a, size_t b) -> size_t {
    const auto& x = groups[a].context;
    const auto& y = groups[b].context;
    const size_t limit = std::min(x.size(), y.size());
    size_t n = 0;
    while (n < limit && x[n] == y[n]) ++n;
    return std::min(n, limit == 0 ? 0 : limit - 1);
  };
  std::vector<PrefixCluster> clusters;
  auto close = [&](PrefixCluster& c) {
    if (c.groups.size() < 2) c.prefix_length = 0;
    std::sort(c.groups.begin(), c.groups.end());
    clusters.push_back(std::move(c));
    c = PrefixCluster{};
  };
  PrefixCluster current;
  for (size_t k = 0; k < order.size(); ++k) {
    if (current.groups.empty()) {
      current.groups.push_back(order[k]);
      current.prefix_length = std::numeric_limits<size_t>::max();
      continue;
    }
    const size_t lcp = shared(order[k - 1], order[k]);
    const size_t n = current.groups.size();
    const size_t merged = std::min(current.prefix_length, lcp);
    // Tokens saved: (members - 1) * prefix. Joining must not lower the cluster's saving.
    const bool join = merged >= min_prefix && merged > 0 &&
                      (n == 1 || static_cast<double>(n) * merged >= static_cast<double>(n - 1) * current.prefix_length);
    if (join) {
      current.groups.push_back(order[k]);
      current.prefix_length = merged;
    } else {
      close(current);
      current.groups.push_back(order[k]);
      current.prefix_length = std::numeric_limits<size_t>::max();
    }
  }
  if (!current.groups.empty()) close(current);
  std::sort(clusters.begin(), clusters.end(),
            [](const PrefixCluster& a, const PrefixCluster& b) { return a.groups.front() < b.groups.front(); });
  return clusters;
}

bool SequenceFill::opens(int64_t length) const {
  return std::none_of(room_.begin(), room_.end(), [&](int64_t room) { return room >= length; });
}

size_t SequenceFill::place(int64_t length) {
  for (size_t s = 0; s < room_.size(); ++s) {
    if (room_[s] >= length) {
      room_[s] -= length;
      return s;
    }
  }
  room_.push_back(std::max<int64_t>(width_ - length, 0));
  return room_.size() - 1;
}

namespace {

// Rows side by side in sequences `width` wide (the longest row's when 0; SequenceFill): each row becomes a part,
// its segments offset by its part number and its target columns by where it starts.
std::vector<PackedRow> pack_sequences(std::vector<PackedRow> rows, int64_t width) {
  if (rows.size() < 2) return rows;
  if (width <= 0)
    for (const PackedRow& r : rows) width = std::max<int64_t>(width, static_cast<int64_t>(r.tokens.size()));
  SequenceFill fill(width);
  std::vector<PackedRow> sequences;
  std::vector<int64_t> parts;
  for (PackedRow& row : rows) {
    const size_t s = fill.place(static_cast<int64_t>(row.tokens.size()));
    if (s == sequences.size()) {
      sequences.push_back(std::move(row));
      parts.push_back(1);
      continue;
    }
    PackedRow& seq = sequences[s];
    const int64_t offset = static_cast<int64_t>(seq.tokens.size());
    const int64_t part = parts[s]++;
    seq.tokens.insert(seq.tokens.end(), row.tokens.begin(), row.tokens.end());
    seq.positions.insert(seq.positions.end(), row.positions.begin(), row.positions.end());
    for (int64_t segment : row.segments) seq.segments.push_back(part * kSegmentsPerPart + segment);
    for (PackedRow::Target t : row.targets) {
      t.column += offset;
      seq.targets.push_back(t);
    }
  }
  return sequences;
}

}  // namespace

std::vector<PackedRow> split_parts(const PackedRow& sequence) {
  std::vector<PackedRow> parts;
  std::vector<int64_t> starts;
  for (size_t j = 0; j < sequence.tokens.size(); ++j) {
    const int64_t part = sequence.segments[j] / kSegmentsPerPart;
    if (parts.empty() || part != static_cast<int64_t>(parts.size()) - 1) {
      parts.emplace_back();
      starts.push_back(static_cast<int64_t>(j));
    }
    PackedRow& row = parts.back();
    row.tokens.push_back(sequence.tokens[j]);
    row.positions.push_back(sequence.positions[j]);
    row.segments.push_back(sequence.segments[j] % kSegmentsPerPart);
  }
  for (PackedRow::Target t : sequence.targets) {
    // The part whose columns hold the target: the last that starts at or before it.
    const size_t p = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), t.column) - starts.begin()) - 1;
    t.column -= starts[p];
    parts[p].targets.push_back(t);
  }
  return parts;
}

std::vector<PackedRow> pack_rows(const Batch& batch) {
  const size_t p = batch.prefix.size();
  for (const WorkItem& item : batch.items) {
    const int64_t n = static_cast<int64_t>(item.tokens.size());
    if (item.first_target < 1 || item.first_target > n)
      throw Error(fmt::format("batch {}: request {} part {}: first_target {} outside [1, {}]", batch.id,
                              item.request_index, item.part, item.first_target, n));
    if (p == 0) continue;
    if (item.first_target <= static_cast<int64_t>(p) ||
        !std::equal(batch.prefix.begin(), batch.prefix.end(), item.tokens.begin()))
      throw Error(fmt::format("batch {}: request {} part {} does not extend the batch's {}-token prefix", batch.id,
                              item.request_index, item.part, p));
  }
  std::vector<PackedRow> rows;
  for (const ContextGroup& group : group_by_context(batch.items, batch.share_contexts)) {
    PackedRow row;
    const int64_t context = static_cast<int64_t>(group.context.size());
    for (int64_t j = static_cast<int64_t>(p); j < context; ++j) {
      row.tokens.push_back(group.context[static_cast<size_t>(j)]);
      row.positions.push_back(j);
      row.segments.push_back(0);
    }
    const int64_t last_trunk = context - static_cast<int64_t>(p) - 1;
    int64_t branch = 0;
    for (size_t i : group.items) {
      const WorkItem& item = batch.items[i];
      if (!has_targets(item)) continue;
      const int64_t n = static_cast<int64_t>(item.tokens.size());
      const int64_t begin = static_cast<int64_t>(row.tokens.size());
      if (branch_inputs(item, group.context.size()) > 0) ++branch;
      // The branch: the item's tokens after the trunk (its own context, then its targets but the last).
      for (int64_t j = context; j + 1 < n; ++j) {
        row.tokens.push_back(item.tokens[static_cast<size_t>(j)]);
        row.positions.push_back(j);
        row.segments.push_back(branch);
      }
      // Target j is predicted by the state of token j - 1: the trunk's last when that is in the trunk.
      for (int64_t j = item.first_target; j < n; ++j)
        row.targets.push_back(
            {i, j - 1 < context ? last_trunk : begin + (j - 1 - context), item.tokens[static_cast<size_t>(j)]});
    }
    if (!row.targets.empty()) rows.push_back(std::move(row));
  }
  return batch.share_contexts ? pack_sequences(std::move(rows), batch.sequence_width) : rows;
}

}  // namespace gpueval

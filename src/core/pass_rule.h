// When a worker of a torch DataLoader pass stops waiting for items: a pure
// rule over a queue's stats (see python/src/py_torch_support.cc for why
// such a worker must end its pass). The coordinator answers the same
// question without building the stats (QueueState::PassOver, the PassOver
// RPC); a client asks this rule over Stats only of a coordinator that has
// no PassOver. pass_rule_test.cc checks that the two agree.
#ifndef SHARDQ_CORE_PASS_RULE_H_
#define SHARDQ_CORE_PASS_RULE_H_

#include <string>

#include "shardq/work_item.h"

namespace shardq {

// True when `stats` shows a queue that is not finished, has nothing
// pending, and whose every open item is held by other workers that will
// read it without `self`: workers whose ids start with `siblings` (the
// DataLoader workers of this pass), or any worker with an open session (a
// live client: a DataLoader worker of another rank, which may be parked
// while its rank's loop waits for a worker that waits like `self`, so
// waiting for it could close a cycle across ranks). A holder with no
// session and not a sibling (dead, or not a session client) keeps `self`
// waiting: its lease expires and `self` reads the item. Open items are the leased items of
// the epochs plus the ranges split off held items (split_items_open, which
// no epoch counts): a split-off range nobody holds yet keeps the worker
// waiting, since it is there for the taking.
bool OnlySiblingsHoldTheRest(const QueueStats& stats, const std::string& self,
                             const std::string& siblings);

}  // namespace shardq

#endif  // SHARDQ_CORE_PASS_RULE_H_

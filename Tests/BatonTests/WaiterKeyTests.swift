import Foundation
import XCTest

@testable import Baton

/// WaiterKey in Dictionary and Set: random inserts, removals (with the shifts they cause), lookups and
/// growth/shrink against a [UInt64: Int] reference; ids sequential, random, and sharing their low bits.
/// `WaiterKey` (6ae1a63) against `UInt64` keys in dictionaries. Written by the review of that change.
final class WaiterKeyTests: XCTestCase {
    func testWaiterKeyDictionaryMatchesAReference() {
        let trials = Int(ProcessInfo.processInfo.environment["BATON_KEY_TRIALS"] ?? "") ?? 60
        for trial in 0..<trials {
            var rng = SeededRandom(seed: UInt64(trial) + 1)
            var keyed: [WaiterKey: Int] = [:]
            var reference: [UInt64: Int] = [:]
            var universe: [UInt64]
            switch trial % 4 {
            case 0: universe = Array(1...4_000)
            case 1: universe = (0..<4_000).map { UInt64($0) << 32 }
            case 2: universe = (0..<4_000).map { _ in UInt64.random(in: 0...UInt64.max, using: &rng) }
            default: universe = (0..<4_000).map { UInt64($0) &* 0x1_0000_0000_0000 | 7 }
            }
            for step in 0..<40_000 {
                let id = universe.randomElement(using: &rng)!
                switch Int.random(in: 0..<10, using: &rng) {
                case 0..<4:
                    keyed[WaiterKey(id)] = step
                    reference[id] = step
                case 4..<7:
                    XCTAssertEqual(keyed.removeValue(forKey: WaiterKey(id)), reference.removeValue(forKey: id))
                case 7:
                    if let index = keyed.index(forKey: WaiterKey(id)) {
                        XCTAssertEqual(keyed[index].key.id, id)
                        keyed.remove(at: index)
                        reference[id] = nil
                    } else {
                        XCTAssertNil(reference[id])
                    }
                case 8:
                    if Int.random(in: 0..<200, using: &rng) == 0 {
                        keyed.removeAll(keepingCapacity: Bool.random(using: &rng))
                        reference.removeAll()
                    }
                default:
                    let copy = keyed   // a copy that is then written: a separate storage, another seed
                    keyed[WaiterKey(id &+ 1)] = -1
                    reference[id &+ 1] = -1
                    XCTAssertEqual(copy[WaiterKey(id &+ 1)], copy.isEmpty ? nil : copy[WaiterKey(id &+ 1)])
                }
                XCTAssertEqual(keyed[WaiterKey(id)], reference[id])
                if keyed.count != reference.count {
                    XCTFail("trial \(trial) step \(step): counts \(keyed.count) \(reference.count)")
                    return
                }
            }
            for (id, value) in reference where keyed[WaiterKey(id)] != value {
                XCTFail("trial \(trial): \(id) lost")
                return
            }
            XCTAssertEqual(Set(keyed.keys.map(\.id)), Set(reference.keys))
            XCTAssertEqual(Set(keyed.keys).count, keyed.count)
            for seed in [0, 1, -1, Int.max, Int.min, 12345] {
                for id in universe.prefix(100) {
                    XCTAssertEqual(WaiterKey(id)._rawHashValue(seed: seed), WaiterKey(id)._rawHashValue(seed: seed))
                }
            }
            XCTAssertEqual(AnyHashable(WaiterKey(5)), AnyHashable(WaiterKey(5)))
            XCTAssertEqual(Set([AnyHashable(WaiterKey(5)), AnyHashable(WaiterKey(5))]).count, 1)
        }
    }
}

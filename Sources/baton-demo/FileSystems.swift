import CBatonDemo
import Foundation

/// File systems whose files the audit never reads: their "files" are the kernel's, and a read may
/// block forever (`/proc/kmsg`), never end, or consume what it reads (the kernel log, a pipe, an
/// event queue). A directory on one of them is reported as skipped, with the file system's name.
enum PseudoFileSystem {
    /// Linux's magic numbers (`statfs`'s `f_type`, from `<linux/magic.h>`) of the pseudo-file systems.
    static let linux: [UInt64: String] = [
        0x9FA0: "procfs", 0x6265_6572: "sysfs", 0x6462_6720: "debugfs", 0x7472_6163: "tracefs",
        0x7363_6673: "securityfs", 0x0027_E0EB: "cgroup", 0x6367_7270: "cgroup2", 0x1CD1: "devpts",
        0xCAFE_4A11: "bpf", 0x6165_676C: "pstore", 0x6265_6570: "configfs", 0x6573_5543: "fusectl",
        0xDE5E_81E4: "efivarfs", 0x1980_0202: "mqueue", 0x4249_4E4D: "binfmt_misc", 0xF97C_FF8C: "selinuxfs",
        0x4341_5D53: "smackfs", 0x0187: "autofs", 0x6E73_6673: "nsfs", 0x6759_6969: "rpc_pipefs",
        0x9FA2: "usbdevfs", 0x9FA1: "openpromfs", 0x6E66_7364: "nfsd", 0x0A64_7361: "functionfs", 0xABBA_1974: "xenfs",
        0x0765_5821: "resctrl", 0x6C6F_6F70: "binderfs", 0x444D_4142: "dma-buf", 0x5346_414F: "afs",
    ]
    /// Apple platforms' names (`statfs`'s `f_fstypename`) of the pseudo-file systems.
    static let apple: Set<String> = ["devfs", "fdesc", "autofs"]

    /// The name of the pseudo-file system that `descriptor` is on, or nil if it is an ordinary one
    /// (or its type cannot be told, in which case the per-read deadline is the guard).
    static func name(of descriptor: Int32) -> String? {
        var magic: UInt64 = 0
        var name = [CChar](repeating: 0, count: 32)
        guard baton_demo_file_system(descriptor, &magic, &name, name.count) == 0 else { return nil }
        #if canImport(Darwin)
        let typeName = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return apple.contains(typeName) ? typeName : nil
        #else
        return linux[magic]
        #endif
    }
}

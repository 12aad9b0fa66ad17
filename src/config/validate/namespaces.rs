//! Namespaces across mounts: each mount's namespace (written or its name)
//! must be unique, whatever else is wrong with the mounts.

use std::collections::BTreeMap;

use crate::config::{problems::Problems, MountConfig, Problem};
use crate::naming::{MountName, Namespace, Separator};

/// Two mounts may not share a non-empty namespace, and no `namespace +
/// separator` may be a prefix of another's, or a qualified name could be
/// split two ways.
///
/// Also for a reload, which keeps the running `[server]` (and so its
/// separator): the new mounts must be unambiguous with that one.
pub fn namespace_problems(mounts: &[MountConfig], separator: &Separator) -> Vec<Problem> {
    let mut problems = Problems::default();
    let named = mounts.iter().map(|mount| (&mount.name, &mount.namespace));
    check_namespaces(named, Some(separator), &mut problems);
    problems.into_error("").problems
}

/// Mount `name`'s namespace (`written`, or the mount's name), if both are
/// valid (an invalid one is reported where the mount is resolved).
pub(super) fn namespace_of(name: &str, written: Option<&str>) -> Option<(MountName, Namespace)> {
    let mount_name = MountName::new(name).ok()?;
    let namespace = match written {
        Some(written) => Namespace::new(written).ok()?,
        None => Namespace::from_mount(&mount_name),
    };
    Some((mount_name, namespace))
}

/// Namespaces used twice, and, with the `separator` (`None`: itself
/// invalid, reported on its own), namespaces that would make names
/// ambiguous.
pub(super) fn check_namespaces<'a>(
    mounts: impl Iterator<Item = (&'a MountName, &'a Namespace)>,
    separator: Option<&Separator>,
    problems: &mut Problems,
) {
    let mut seen: BTreeMap<&str, &MountName> = BTreeMap::new();
    for (name, namespace) in mounts {
        if namespace.is_pass_through() {
            continue;
        }
        if let Some(first) = seen.get(namespace.as_str()) {
            problems.push(
                format!("mounts.{name}.namespace"),
                format!(
                    "namespace {:?} is already used by mount {first}",
                    namespace.as_str()
                ),
            );
            continue;
        }
        seen.insert(namespace.as_str(), name);
    }
    let Some(separator) = separator else {
        return;
    };
    for (a, mount_a) in &seen {
        for (b, mount_b) in &seen {
            let prefix = format!("{a}{}", separator.as_str());
            if a != b && format!("{b}{}", separator.as_str()).starts_with(&prefix) {
                problems.push(
                    format!("mounts.{mount_b}.namespace"),
                    format!(
                        "namespace {b:?} followed by separator {:?} starts with mount {mount_a}'s namespace {a:?} and the separator, so names would be ambiguous",
                        separator.as_str()
                    ),
                );
            }
        }
    }
}

//! Where an image's bytes live: Ceph's striping (object size, stripe unit, stripe count) as a
//! pure function from an image range to object extents.
//!
//! The image is cut into stripe units; consecutive units go round-robin over `stripe_count`
//! objects (an *object set*), each object taking `object_size / stripe_unit` units before the
//! next set begins. With the default layout (`stripe_unit == object_size`, `stripe_count == 1`)
//! byte `b` of the image is byte `b % object_size` of object `b / object_size`.

use serde::{Deserialize, Serialize};

use crate::error::RbdError;

/// The smallest object size and stripe unit accepted (Ceph's minimum order is 12).
pub const MIN_OBJECT_BYTES: u64 = 4096;
/// The largest object size accepted (Ceph's maximum order is 25).
pub const MAX_OBJECT_BYTES: u64 = 32 << 20;
/// The most objects one stripe may span.
pub const MAX_STRIPE_COUNT: u64 = 4096;

/// An image's striping layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub object_size_bytes: u64,
    pub stripe_unit_bytes: u64,
    pub stripe_count: u64,
}

/// One piece of an image range: `len_bytes` at `object_offset` of object number `object_no`,
/// holding the image's bytes from `image_offset` (each extent lies within one stripe unit, so
/// the mapping inside it is linear).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub object_no: u64,
    pub object_offset: u64,
    pub len_bytes: u64,
    pub image_offset: u64,
}

impl Layout {
    /// The default layout for objects of `object_size_bytes`: no striping.
    pub fn plain(object_size_bytes: u64) -> Layout {
        Layout { object_size_bytes, stripe_unit_bytes: object_size_bytes, stripe_count: 1 }
    }

    /// Checks the layout: powers of two, the unit dividing the object, bounded counts.
    pub fn validate(&self) -> Result<(), RbdError> {
        let Layout { object_size_bytes: os, stripe_unit_bytes: su, stripe_count: sc } = *self;
        if !os.is_power_of_two() || !(MIN_OBJECT_BYTES..=MAX_OBJECT_BYTES).contains(&os) {
            return Err(RbdError::Invalid(format!(
                "object size {os} must be a power of two from {MIN_OBJECT_BYTES} to {MAX_OBJECT_BYTES} bytes"
            )));
        }
        if !su.is_power_of_two() || su < MIN_OBJECT_BYTES || su > os {
            return Err(RbdError::Invalid(format!(
                "stripe unit {su} must be a power of two from {MIN_OBJECT_BYTES} bytes to the object size ({os})"
            )));
        }
        if sc == 0 || sc > MAX_STRIPE_COUNT {
            return Err(RbdError::Invalid(format!("stripe count {sc} must be from 1 to {MAX_STRIPE_COUNT}")));
        }
        Ok(())
    }

    /// Bytes of image one object set covers.
    pub fn set_bytes(&self) -> u64 {
        self.object_size_bytes * self.stripe_count
    }

    /// How many object numbers an image of `size_bytes` may use (objects `0..count`).
    pub fn object_count(&self, size_bytes: u64) -> u64 {
        let sets = size_bytes.div_ceil(self.set_bytes());
        sets * self.stripe_count
    }

    /// The extents of image range `offset..offset + len_bytes`, in image order.
    pub fn extents(&self, offset: u64, len_bytes: u64) -> Vec<Extent> {
        let (su, sc) = (self.stripe_unit_bytes, self.stripe_count);
        let units_per_object = self.object_size_bytes / su;
        let mut out = Vec::new();
        let mut at = offset;
        let end = offset + len_bytes;
        while at < end {
            let block = at / su;
            let stripe = block / sc;
            let position = block % sc;
            let object_set = stripe / units_per_object;
            let object_no = object_set * sc + position;
            let within = at % su;
            let len = (su - within).min(end - at);
            let object_offset = (stripe % units_per_object) * su + within;
            match out.last_mut() {
                // With no striping consecutive units of one object are contiguous in it.
                Some(Extent { object_no: o, object_offset: oo, len_bytes: l, .. })
                    if *o == object_no && *oo + *l == object_offset =>
                {
                    *l += len;
                }
                _ => out.push(Extent { object_no, object_offset, len_bytes: len, image_offset: at }),
            }
            at += len;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn plain_layout_maps_bytes_to_objects_by_division() {
        let l = Layout::plain(4 << 20);
        let e = l.extents((4 << 20) - 10, 20);
        assert_eq!(
            e,
            vec![
                Extent { object_no: 0, object_offset: (4 << 20) - 10, len_bytes: 10, image_offset: (4 << 20) - 10 },
                Extent { object_no: 1, object_offset: 0, len_bytes: 10, image_offset: 4 << 20 },
            ]
        );
        assert_eq!(l.object_count(10 << 20), 3);
    }

    #[test]
    fn striped_layout_goes_round_robin_over_an_object_set() {
        // 16 KiB objects, 4 KiB units, 3 objects per set: units 0,1,2 go to objects 0,1,2 at
        // offset 0, units 3,4,5 at offset 4 KiB, ...; unit 12 starts the next set (objects 3..6).
        let l = Layout { object_size_bytes: 16 << 10, stripe_unit_bytes: 4 << 10, stripe_count: 3 };
        l.validate().unwrap();
        let e = l.extents(0, 16 << 10);
        let objs: Vec<(u64, u64)> = e.iter().map(|x| (x.object_no, x.object_offset)).collect();
        assert_eq!(objs, vec![(0, 0), (1, 0), (2, 0), (0, 4096)]);
        let e = l.extents(12 * 4096, 1);
        assert_eq!(e[0].object_no, 3);
        assert_eq!(e[0].object_offset, 0);
        assert_eq!(l.object_count(13 * 4096), 6);
    }

    #[test]
    fn bad_layouts_are_refused_with_their_reason() {
        let bad = [
            Layout { object_size_bytes: 3 << 20, stripe_unit_bytes: 1 << 20, stripe_count: 1 },
            Layout { object_size_bytes: 1024, stripe_unit_bytes: 1024, stripe_count: 1 },
            Layout { object_size_bytes: 4 << 20, stripe_unit_bytes: 8 << 20, stripe_count: 1 },
            Layout { object_size_bytes: 4 << 20, stripe_unit_bytes: 1 << 20, stripe_count: 0 },
        ];
        for l in bad {
            assert!(matches!(l.validate(), Err(RbdError::Invalid(_))), "{l:?}");
        }
    }

    fn layouts() -> impl Strategy<Value = Layout> {
        (12u32..=16, 0u32..=4, 1u64..=5).prop_map(|(order, unit_shift, sc)| {
            let os = 1u64 << order;
            Layout {
                object_size_bytes: os,
                stripe_unit_bytes: (os >> unit_shift).max(MIN_OBJECT_BYTES),
                stripe_count: sc,
            }
        })
    }

    proptest! {
        /// Every image byte maps to exactly one (object, offset), every mapping stays inside
        /// its object and inside the object numbers the image size allows, and extents cover
        /// the range in order without gaps.
        #[test]
        fn extents_are_a_bijection_onto_object_bytes(l in layouts(), offset in 0u64..1 << 20, len in 1u64..1 << 18) {
            l.validate().unwrap();
            let e = l.extents(offset, len);
            let mut at = offset;
            let mut seen = std::collections::HashSet::new();
            for x in &e {
                prop_assert_eq!(x.image_offset, at);
                prop_assert!(x.object_offset + x.len_bytes <= l.object_size_bytes);
                prop_assert!(x.object_no < l.object_count(offset + len));
                // Sample the ends of each extent: distinct image bytes, distinct object bytes.
                for b in [0, x.len_bytes - 1] {
                    prop_assert!(seen.insert((x.object_no, x.object_offset + b)) || x.len_bytes == 1);
                    let back = l.extents(x.image_offset + b, 1)[0];
                    prop_assert_eq!((back.object_no, back.object_offset), (x.object_no, x.object_offset + b));
                }
                at += x.len_bytes;
            }
            prop_assert_eq!(at, offset + len);
        }
    }
}

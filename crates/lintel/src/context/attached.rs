//! The doors and buffers a request carries besides its bytes, as
//! [`Attached`] lists.
//!
//! A plain `Vec` would do but for its drop. A handler owns its request and
//! drops it, and dropping a `Vec` whose elements have drop code of their own
//! is an out-of-line loop that saves half a dozen registers first, even when
//! the vector is empty, as it nearly always is. An [`Attached`] list tests
//! its capacity inline and calls out only when it holds something: on a
//! null call across domains, 25 instructions fewer on the server's side of
//! the round trip (the benchmark's null handler with its request's drop,
//! 42 → 17).

use std::fmt;
use std::mem::{ManuallyDrop, take};
use std::ops::{Deref, DerefMut};

/// Doors or buffers passed with a call ([`crate::Request::doors`],
/// [`crate::Request::buffers`]): a `Vec<T>` to read and change (it
/// dereferences to one) that costs one test to drop while empty.
///
/// ```
/// use lintel::{Attached, Door, Reply, Request};
///
/// let keep = |mut req: Request<'_>, _: &mut Reply| {
///     let first: Option<Door> = req.doors.pop(); // a Vec's methods
///     let rest: Vec<Door> = req.doors.into_vec(); // or the Vec itself
///     drop((first, rest));
///     Ok(())
/// };
/// # let _ = Door::create(0, keep);
/// let none: Attached<Door> = Attached::default();
/// assert!(none.is_empty());
/// ```
pub struct Attached<T>(ManuallyDrop<Vec<T>>);

impl<T> Attached<T> {
    /// An empty list (allocates nothing).
    pub const fn new() -> Attached<T> {
        Attached(ManuallyDrop::new(Vec::new()))
    }

    /// The vector, taken out.
    pub fn into_vec(mut self) -> Vec<T> {
        take(&mut *self.0)
    }
}

impl<T> Drop for Attached<T> {
    #[inline]
    fn drop(&mut self) {
        // (A vector with no capacity owns nothing: no elements, no memory.)
        if self.0.capacity() != 0 {
            drop_vec(&mut self.0);
        }
    }
}

/// [`Attached`]'s drop of a vector that holds something: taken out and
/// dropped, which leaves an empty one (that owns nothing) in its place.
#[cold]
#[inline(never)]
fn drop_vec<T>(v: &mut Vec<T>) {
    drop(take(v));
}

impl<T> Deref for Attached<T> {
    type Target = Vec<T>;
    #[inline]
    fn deref(&self) -> &Vec<T> {
        &self.0
    }
}

impl<T> DerefMut for Attached<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.0
    }
}

impl<T> Default for Attached<T> {
    fn default() -> Attached<T> {
        Attached::new()
    }
}

impl<T> From<Vec<T>> for Attached<T> {
    fn from(v: Vec<T>) -> Attached<T> {
        Attached(ManuallyDrop::new(v))
    }
}

impl<T> From<Attached<T>> for Vec<T> {
    fn from(a: Attached<T>) -> Vec<T> {
        a.into_vec()
    }
}

impl<T: fmt::Debug> fmt::Debug for Attached<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<T> IntoIterator for Attached<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;
    fn into_iter(self) -> std::vec::IntoIter<T> {
        self.into_vec().into_iter()
    }
}

impl<'a, T> IntoIterator for &'a Attached<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> std::slice::Iter<'a, T> {
        self.0.iter()
    }
}

impl<'a, T> IntoIterator for &'a mut Attached<T> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;
    fn into_iter(self) -> std::slice::IterMut<'a, T> {
        self.0.iter_mut()
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;

    /// What a list holds is dropped with it, however it was filled.
    #[test]
    fn elements_are_dropped_with_the_list() {
        let item = Rc::new(());
        let mut pushed = Attached::new();
        pushed.push(item.clone());
        let from: Attached<_> = vec![item.clone(), item.clone()].into();
        assert_eq!(Rc::strong_count(&item), 4);
        drop((pushed, from));
        assert_eq!(Rc::strong_count(&item), 1);
    }

    /// Taken out, the vector keeps the elements; the emptied list drops none.
    #[test]
    fn into_vec_and_iteration_move_the_elements_out() {
        let item = Rc::new(());
        let list: Attached<_> = vec![item.clone(), item.clone()].into();
        let v = list.into_vec();
        assert_eq!(Rc::strong_count(&item), 3);
        let list: Attached<_> = v.into();
        let moved: Vec<Rc<()>> = list.into_iter().collect();
        assert_eq!(moved.len(), 2);
        assert_eq!(Rc::strong_count(&item), 3);
        drop(moved);
        assert_eq!(Rc::strong_count(&item), 1);
    }
}

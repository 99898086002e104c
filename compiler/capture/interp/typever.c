/* Version tags of types and dicts: the one place capture reads CPython
 * structs past the stable ABI.
 *
 * CPython gives every type a version tag that its method cache relies on:
 * any change to the type's dict or its bases (PyType_Modified) invalidates
 * it, and a new tag is never one used before. So a class attribute looked up
 * while the tag was T is still the same object while the tag is still T, and
 * a method guard can compare two integers instead of walking the MRO.
 *
 * Every dict has one too (PEP 509's ma_version_tag, deprecated in 3.12 but
 * still kept): every insertion, deletion, replacement or clear gives the dict
 * a new value from a global counter, and so does its creation. While a dict
 * (held, so its address is not reused) has the version it had, it holds the
 * same values: a cache hit can take the module-held values of its last full
 * check after comparing the versions of the dicts they came from.
 *
 * The stable ABI (the rest of capture, but tracebacks.c, which calls
 * PyFrame_New) hides PyTypeObject and PyDictObject, so this file is compiled
 * against the full headers. The fields read sit at
 * the same offsets in 3.11 and 3.12 (the versions ptc's one abi3 build loads
 * on); on any other runtime the tags read as 0, "unknown", and guards look
 * everything up as before.
 */
#undef Py_LIMITED_API
#include <Python.h>

#include "capture/interp/interp.h"

bool cap_versions_known(void)
{
    static int known = -1;
    if (known < 0) {
        unsigned long v = Py_Version >> 16;
        known = v == 0x030B || v == 0x030C;
    }
    return known;
}

unsigned int cap_type_version(PyTypeObject *t)
{
    if (!cap_versions_known() || !PyType_HasFeature(t, Py_TPFLAGS_VALID_VERSION_TAG))
        return 0;
    return t->tp_version_tag;
}

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
uint64_t cap_dict_version(PyObject *d)
{
    if (!cap_versions_known() || !PyDict_Check(d))
        return 0;
    return ((PyDictObject *)d)->ma_version_tag;
}

bool cap_snap_valid(const cap_snap *s, int n)
{
    if (!cap_versions_known())
        return false;
    for (int k = 0; k < n; k++) {
        if (((PyDictObject *)s[k].dict)->ma_version_tag != s[k].ver)
            return false;
        if (s[k].owner) {
            PyObject *d = PyObject_GenericGetDict(s[k].owner, NULL);
            if (!d) {
                PyErr_Clear();
                return false;
            }
            Py_DECREF(d); /* the owner keeps it */
            if (d != s[k].dict)
                return false;
        }
    }
    return true;
}
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

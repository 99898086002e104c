# What `cmake --install` and a wheel install: the four tools, the ptc Python
# package, the man pages, and (cmake --install only) libptc with its module
# headers. Under scikit-build-core (SKBUILD) the same rules aim at the wheel's
# folders: tools into its scripts dir (the environment's bin/), man pages into
# its data dir (the environment's share/man/, which `man` finds through PATH),
# the extension into the package (site-packages/ptc).
include(GNUInstallDirs)

if(SKBUILD)
  set(ptc_bindir ${SKBUILD_SCRIPTS_DIR})
  set(ptc_mandir ${SKBUILD_DATA_DIR}/${CMAKE_INSTALL_MANDIR})
  set(ptc_pydir .) # the wheel's platlib; the .py files come from python/ptc
else()
  set(ptc_bindir ${CMAKE_INSTALL_BINDIR})
  set(ptc_mandir ${CMAKE_INSTALL_MANDIR})
  set(ptc_pydir "${PTC_PY_SITE}")
endif()

foreach(tool ptc-run ptview ptminify ptexplain)
  if(TARGET ${tool})
    install(TARGETS ${tool} RUNTIME DESTINATION ${ptc_bindir})
  endif()
endforeach()

file(GLOB ptc_man1 ${CMAKE_SOURCE_DIR}/man/*.1)
file(GLOB ptc_man7 ${CMAKE_SOURCE_DIR}/man/*.7)
install(FILES ${ptc_man1} DESTINATION ${ptc_mandir}/man1)
install(FILES ${ptc_man7} DESTINATION ${ptc_mandir}/man7)

if(TARGET ptc_python AND NOT ptc_pydir STREQUAL "")
  install(TARGETS ptc_python LIBRARY DESTINATION ${ptc_pydir}/ptc)
  if(NOT SKBUILD)
    install(DIRECTORY ${CMAKE_SOURCE_DIR}/python/ptc DESTINATION ${ptc_pydir}
            FILES_MATCHING PATTERN "*.py")
  endif()
endif()

# The C library and the headers of its modules (include/ptc/<module>/<m>.h,
# as the sources include them: add -I<prefix>/include/ptc).
if(NOT SKBUILD)
  install(TARGETS ptc ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  foreach(header ir/ir.h ir/ops.def ir/pointwise.def ops/ops.h ops/meta.h ops/ref.h passes/passes.h
                 lower/lower.h codegen/codegen.h runtime/runtime.h pipeline/pipeline.h
                 export/export.h)
    get_filename_component(dir ${header} DIRECTORY)
    install(FILES ${CMAKE_SOURCE_DIR}/compiler/${header}
            DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ptc/${dir})
  endforeach()
  install(FILES ${CMAKE_SOURCE_DIR}/logs/logs.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ptc/logs)
endif()
